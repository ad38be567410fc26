"""TLS for a cluster: one certificate authority, and one certificate signed by it that the
scheduler, the workers and the submitting side all present (Dask checks both ends of every
connection against the CA, so only holders of a signed certificate get in).

A folder made by `dtnet scheduler --tls DIR` holds ca.pem, cert.pem, key.pem and ca-key.pem
(keys 0600). Copy it without ca-key.pem to the workers and the submitting machine.
"""
from __future__ import annotations

import datetime
import ipaddress
import os
import shutil
import subprocess

from badinput import InputError

CA, CERT, KEY, CA_KEY = "ca.pem", "cert.pem", "key.pem", "ca-key.pem"
DAYS = 365
NEEDED = (CA, CERT, KEY)  # what every member of the cluster needs (not the CA's key)


def paths(cert_dir: str, flag: str = "--tls") -> dict:
    """The three files a member presents, checked: the folder `dtnet scheduler --tls` made."""
    cert_dir = os.path.abspath(cert_dir)
    missing = [n for n in NEEDED if not os.path.isfile(os.path.join(cert_dir, n))]
    if missing:
        raise InputError(flag, f"a folder with {', '.join(NEEDED)} (made by `dtnet scheduler --tls DIR`)",
                         f"{cert_dir} without {', '.join(missing)}")
    return {n: os.path.join(cert_dir, n) for n in NEEDED}


def security(cert_dir: str, flag: str = "--tls"):
    """Dask's Security for a client or a member: its certificate, the CA, encryption required."""
    from distributed.security import Security
    p = paths(cert_dir, flag)
    return Security(tls_ca_file=p[CA], tls_client_cert=p[CERT], tls_client_key=p[KEY],
                    tls_scheduler_cert=p[CERT], tls_scheduler_key=p[KEY],
                    tls_worker_cert=p[CERT], tls_worker_key=p[KEY], require_encryption=True)


def dask_args(cert_dir: str, flag: str = "--tls") -> list[str]:
    """The `dask scheduler` / `dask worker` options that make it use the folder's certificate."""
    p = paths(cert_dir, flag)
    return ["--tls-ca-file", p[CA], "--tls-cert", p[CERT], "--tls-key", p[KEY]]


def ensure(cert_dir: str, host: str, log=print) -> dict:
    """The folder's certificate files, made first when it has none (a new CA and a certificate
    naming host, localhost and 127.0.0.1)."""
    cert_dir = os.path.abspath(cert_dir)
    if all(os.path.isfile(os.path.join(cert_dir, n)) for n in NEEDED):
        return paths(cert_dir)
    if os.path.exists(cert_dir) and os.listdir(cert_dir):
        raise InputError("--tls", f"an empty or new folder, or one with {', '.join(NEEDED)}",
                         f"{cert_dir} with other files")
    os.makedirs(cert_dir, mode=0o700, exist_ok=True)
    names = sorted({host, "localhost", "127.0.0.1"})
    try:
        import cryptography  # noqa: F401
        _make_with_cryptography(cert_dir, names)
    except ImportError:
        _make_with_openssl(cert_dir, names)
    for n in (KEY, CA_KEY):
        os.chmod(os.path.join(cert_dir, n), 0o600)
    log(f"dtnet scheduler: made a CA and a certificate for {', '.join(names)} in {cert_dir} "
        f"(copy it without {CA_KEY} to every worker and submitting machine)")
    return paths(cert_dir)


def _write_private(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _write_public(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _san(names):
    from cryptography import x509
    out = []
    for n in names:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            out.append(x509.DNSName(n))
    return x509.SubjectAlternativeName(out)


def _make_with_cryptography(cert_dir: str, names) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def build(subject, issuer, pub, signer, ca: bool, serial: int):
        b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(pub)
             .serial_number(serial).not_valid_before(now - datetime.timedelta(minutes=5))
             .not_valid_after(now + datetime.timedelta(days=DAYS))
             .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if not ca:
            b = b.add_extension(_san(names), critical=False)
        return b.sign(signer, hashes.SHA256())

    def pem_key(k):
        return k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                               serialization.NoEncryption())
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "dtnet cluster CA")])
    ca = build(ca_name, ca_name, ca_key.public_key(), ca_key, True, x509.random_serial_number())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "dtnet cluster member")])
    cert = build(name, ca_name, key.public_key(), ca_key, False, x509.random_serial_number())
    _write_private(os.path.join(cert_dir, CA_KEY), pem_key(ca_key))
    _write_private(os.path.join(cert_dir, KEY), pem_key(key))
    _write_public(os.path.join(cert_dir, CA), ca.public_bytes(serialization.Encoding.PEM))
    _write_public(os.path.join(cert_dir, CERT), cert.public_bytes(serialization.Encoding.PEM))


def _make_with_openssl(cert_dir: str, names) -> None:
    """The same files by the openssl command (no shell; every argument a fixed word or a
    checked name)."""
    exe = shutil.which("openssl")
    if not exe:
        raise InputError("--tls", "Python's cryptography package or the openssl command, to make certificates",
                         "neither")
    san = ",".join((f"IP:{n}" if _is_ip(n) else f"DNS:{n}") for n in names)

    def run(*args):
        r = subprocess.run([exe, *args], cwd=cert_dir, capture_output=True, text=True, close_fds=True)
        if r.returncode:
            raise InputError("--tls", "certificates made by openssl", (r.stderr or "").strip()[:200])
    old = os.umask(0o077)  # openssl writes its keys under this umask: 0600
    try:
        run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", CA_KEY, "-out", CA, "-days", str(DAYS), "-subj", "/CN=dtnet cluster CA")
        run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", KEY, "-out", "req.csr", "-subj", "/CN=dtnet cluster member")
        _write_public(os.path.join(cert_dir, "san.cnf"),
                      f"subjectAltName={san}\nbasicConstraints=critical,CA:FALSE\n".encode())
        run("x509", "-req", "-in", "req.csr", "-CA", CA, "-CAkey", CA_KEY, "-CAcreateserial", "-out", CERT,
            "-days", str(DAYS), "-extfile", "san.cnf")
    finally:
        os.umask(old)
        for n in ("req.csr", "san.cnf", "ca.srl"):
            if os.path.exists(os.path.join(cert_dir, n)):
                os.remove(os.path.join(cert_dir, n))
    for n in (CA, CERT):
        os.chmod(os.path.join(cert_dir, n), 0o644)


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False
