"""Where `dtnet scheduler` and `dtnet worker` listen, and TLS between them: real Dask
processes on 127.0.0.1 (no root), their sockets read with psutil by the PIDs started here."""
from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
import time

import psutil
import pytest
import yaml

distributed = pytest.importorskip("distributed")

from dtnet.cluster import commands, tls  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ENV = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}


def dtnet(*args, log):
    """A dtnet command in its own process group (ended by that group's id), stderr to log."""
    return subprocess.Popen([sys.executable, "-m", "dtnet", *args], stdout=subprocess.PIPE, stderr=open(log, "w"),
                            text=True, env=ENV, start_new_session=True)


def wait_for(cond, what, timeout_s=60.0):
    deadline = time.monotonic() + timeout_s
    while not (value := cond()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return value


def end(*procs):
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(5)


def listening(pid: int) -> list:
    """Every listening socket of the process and its children."""
    procs = [psutil.Process(pid)] + psutil.Process(pid).children(recursive=True)
    out = []
    for p in procs:
        try:
            out += [c.laddr for c in p.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
        except psutil.NoSuchProcess:
            pass
    return out


def scheduler_address(log) -> str | None:
    m = re.search(r"Scheduler at:\s+(\S+)", open(log).read())
    return m.group(1) if m else None


def registered(log) -> bool:
    return "Registered to" in open(log).read()


def test_a_default_scheduler_and_worker_listen_on_loopback_only(tmp_path):
    s = dtnet("scheduler", "--port", "0", log=tmp_path / "s.log")
    w = None
    try:
        address = wait_for(lambda: scheduler_address(tmp_path / "s.log"), "the scheduler")
        assert s.stdout.readline().rstrip().endswith("no HTTP server")
        w = dtnet("worker", address, "--no-emulator", "--slots", "1", log=tmp_path / "w.log")
        wait_for(lambda: registered(tmp_path / "w.log"), "the worker to register")
        # The worker's process tree: its nanny, and the worker with its HTTP server.
        socks = wait_for(lambda: len(listening(w.pid)) >= 3 and listening(w.pid), "the worker's listeners")
        sched = listening(s.pid)
        assert len(sched) == 1  # the scheduler's port, and no HTTP server
        for a in sched + socks:
            assert a.ip in ("127.0.0.1", "::1"), (a, sched, socks)
        assert "WARNING" not in open(tmp_path / "s.log").read() + open(tmp_path / "w.log").read()
    finally:
        end(*(p for p in (w, s) if p))


def test_a_scheduler_with_a_dashboard_serves_it_on_its_own_host(tmp_path):
    port = _free_port()
    s = dtnet("scheduler", "--port", "0", "--dashboard", "--dashboard-port", str(port), log=tmp_path / "s.log")
    try:
        wait_for(lambda: scheduler_address(tmp_path / "s.log"), "the scheduler")
        socks = wait_for(lambda: len(listening(s.pid)) >= 2 and listening(s.pid), "the dashboard")
        assert {a.ip for a in socks} == {"127.0.0.1"} and port in {a.port for a in socks}
    finally:
        end(s)


def test_listening_beyond_loopback_without_tls_says_what_it_exposes(tmp_path):
    # 192.0.2.1 (TEST-NET-1) is no address of this machine: the line is printed, then Dask fails to bind.
    r = subprocess.run([sys.executable, "-m", "dtnet", "scheduler", "--host", "192.0.2.1", "--port", "0"],
                       capture_output=True, text=True, env=ENV, timeout=60)
    lines = [line for line in r.stderr.splitlines() if "WARNING" in line and "without TLS" in line]
    assert len(lines) == 1 and "can run any code on this machine as" in lines[0] and "--tls" in lines[0]
    assert commands.exposure("w", "127.0.0.1", None) is None and commands.exposure("w", "::1", None) is None
    assert commands.exposure("w", "10.0.0.2", "certs") is None and "10.0.0.2" in commands.exposure("w", "10.0.0.2", None)


def test_a_worker_for_a_remote_scheduler_must_name_its_own_address(capsys):
    from dtnet.cli import main
    assert main(["worker", "tcp://10.0.0.1:8786"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--host" in err and "127.0.0.1" in err and "\n" not in err


def test_a_tls_address_needs_the_certificates_and_tcp_refuses_them(tmp_path, capsys):
    from dtnet.cli import main
    assert main(["worker", "tls://127.0.0.1:8786"]) == 2
    assert "--tls" in capsys.readouterr().err
    assert main(["worker", "tcp://127.0.0.1:8786", "--tls", str(tmp_path)]) == 2
    assert "tls://" in capsys.readouterr().err
    assert main(["worker", "127.0.0.1:8786", "--tls", str(tmp_path)]) == 2  # an empty folder
    assert "ca.pem" in capsys.readouterr().err


def test_tls_scheduler_and_worker_run_a_sweep_point_end_to_end(tmp_path):
    certs = tmp_path / "certs"
    s = dtnet("scheduler", "--port", "0", "--tls", str(certs), log=tmp_path / "s.log")
    w = None
    try:
        address = wait_for(lambda: scheduler_address(tmp_path / "s.log"), "the scheduler")
        assert address.startswith("tls://127.0.0.1:")
        for name in (tls.KEY, tls.CA_KEY):
            assert stat.S_IMODE(os.stat(certs / name).st_mode) == 0o600
        w = dtnet("worker", address, "--tls", str(certs), "--no-emulator", "--slots", "1", log=tmp_path / "w.log")
        wait_for(lambda: registered(tmp_path / "w.log"), "the worker to register")
        # Without the certificates, the scheduler does not let a client in.
        with pytest.raises((OSError, TimeoutError)):
            distributed.Client(address.replace("tls://", "tcp://"), timeout=3, set_as_default=False)
        exp = tmp_path / "sweep.yaml"
        exp.write_text(yaml.safe_dump({
            "name": "tls", "engine": "flow", "topology": {"kind": "fat-tree", "k": 4, "link_gbps": 400},
            "jobs": [{"name": "j0", "hosts": {"count": 4},
                      "workload": {"collective": "all_reduce", "size_bytes": 1048576, "iterations": 1}}],
            "sweep": {"grid": {"controller.routing": ["ecmp"]}}}))
        r = subprocess.run([sys.executable, "-m", "dtnet", "run", str(exp), "--out", str(tmp_path / "out"),
                            "--cluster", address, "--tls", str(certs)], capture_output=True, text=True, env=ENV,
                           timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        assert "complete" in r.stdout
        assert len(list((tmp_path / "out" / "points").glob("*/summary.json"))) == 1
    finally:
        end(*(p for p in (w, s) if p))


def _free_port() -> int:
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("maker", ["_make_with_cryptography", "_make_with_openssl"])
def test_both_certificate_makers_sign_a_member_certificate_with_private_keys(tmp_path, maker):
    import shutil
    if maker == "_make_with_openssl" and not shutil.which("openssl"):
        pytest.skip("no openssl command")
    pytest.importorskip("cryptography")
    d = tmp_path / "c"
    d.mkdir(mode=0o700)
    getattr(tls, maker)(str(d), ["127.0.0.1", "localhost", "lab1"])
    assert sorted(os.listdir(d)) == sorted([tls.CA, tls.CERT, tls.KEY, tls.CA_KEY])
    assert {stat.S_IMODE(os.stat(d / n).st_mode) for n in (tls.KEY, tls.CA_KEY)} == {0o600}
    from cryptography import x509
    ca = x509.load_pem_x509_certificate((d / tls.CA).read_bytes())
    cert = x509.load_pem_x509_certificate((d / tls.CERT).read_bytes())
    from cryptography.hazmat.primitives.asymmetric import ec
    # Raises InvalidSignature unless the CA signed it.
    ca.public_key().verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(cert.signature_hash_algorithm))
    assert cert.issuer == ca.subject
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "lab1" in names.get_values_for_type(x509.DNSName)


def test_tls_without_a_cluster_is_refused(tmp_path, capsys):
    from dtnet.cli import main
    exp = tmp_path / "s.yaml"
    exp.write_text(yaml.safe_dump({
        "name": "t", "engine": "flow", "topology": {"kind": "fat-tree", "k": 4, "link_gbps": 400},
        "jobs": [{"name": "j0", "hosts": {"count": 4},
                  "workload": {"collective": "all_reduce", "size_bytes": 1048576, "iterations": 1}}],
        "sweep": {"grid": {"controller.routing": ["ecmp"]}}}))
    for extra in ([], ["--workers", "1"]):
        assert main(["run", str(exp), "--out", str(tmp_path / "o"), "--tls", str(tmp_path), *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert "--tls" in err and "--cluster tls://" in err and "\n" not in err


@pytest.mark.parametrize("host", ["10.0.0.2:9999", "tcp://10.0.0.2", "a;b", "", "a b"])
def test_a_listen_address_is_a_host_alone(host, capsys):
    from dtnet.cli import main
    assert main(["scheduler", "--host", host]) == 2
    assert main(["worker", "tcp://127.0.0.1:1", "--host", host]) == 2
    err = capsys.readouterr().err
    assert err.count("--host") == 2 and "no scheme, no port" in err
