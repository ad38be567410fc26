"""`dtnet scheduler` and `dtnet worker ADDRESS`: Dask's own scheduler and worker, started with
what a dtnet sweep needs, after the checks a person would want first.

Each ends by exec'ing Dask's command (same process, same PID), so signals, logging and
shutdown are Dask's own. What they add:
- the scheduler leaves a point whose worker died to the client (allowed-failures 0: dtnet
  retries it once, then records it failed with the reason);
- every listener binds 127.0.0.1 unless told (the scheduler starts no HTTP server without
  --dashboard), TLS with --tls DIR, and one line says what listening beyond loopback without
  TLS exposes; the caller's file descriptors are closed before the exec (a flock'ed lock
  stays the caller's);
- the worker offers one point slot per core, the ``emulator`` resource (1: at most one
  emulator point at a time) when this machine can run the emulator, a unique name, and says
  so; an address that does not answer is exit 2 with one line, not a worker retrying for ever.
"""
from __future__ import annotations

import argparse
import getpass
import ipaddress
import os
import socket
import sys

from badinput import InputError
from badinput.paths import check_name
from dtnet.cluster.client import (CONNECT_TIMEOUT_S, DEFAULT_PORT, address_and_tls, can_emulate, check_host,
                                  need_dask)


LOOPBACK = "127.0.0.1"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def exposure(who: str, host: str, tls_dir: str | None) -> str | None:
    """The one line that says what listening on host without TLS exposes, or None."""
    if tls_dir or is_loopback(host):
        return None
    return (f"{who}: WARNING: listening on {host} without TLS: anyone who can reach its ports can run any "
            f"code on this machine as {getpass.getuser()} (use --tls DIR; docs/cluster-sweeps.md)")


def _probe(address: str, timeout_s: float, flag: str, security=None) -> None:
    import asyncio  # here: every dtnet command builds this module's parsers, few probe a scheduler

    from distributed.comm import connect

    async def once():
        kw = security.get_connection_args("client") if security else {}
        comm = await connect(address, timeout=timeout_s, **kw)
        await comm.close()
    try:
        asyncio.run(once())
    except (OSError, TimeoutError) as e:
        raise InputError(flag, f"a Dask scheduler answering at {address} (start one with `dtnet scheduler`)",
                         f"no answer within {timeout_s:g} s ({type(e).__name__})") from None


def exec_closed(argv: list[str], env=None) -> None:
    """exec argv with only stdin, stdout and stderr of ours (no lock or file a caller left open)."""
    os.closerange(3, os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 65536)
    os.execve(argv[0], argv, env if env is not None else os.environ)


def worker_argv(address: str, *, slots: int, name: str, emulator: bool, host: str,
                local_directory: str | None, tls_dir: str | None = None) -> list[str]:
    from dtnet.cluster import tls
    argv = [sys.executable, "-m", "distributed.cli.dask_worker", address, "--nworkers", "1",
            "--nthreads", str(slots), "--name", name, "--no-dashboard", "--host", host,
            # Its HTTP server (health, metrics) listens beside it, not on every interface.
            "--dashboard-address", f"{host}:0"]
    if emulator:
        argv += ["--resources", "emulator=1"]
    if local_directory:
        argv += ["--local-directory", local_directory]
    if tls_dir:
        argv += ["--protocol", "tls", *tls.dask_args(tls_dir)]
    return argv


def cmd_worker(args) -> int:
    need_dask("dtnet worker")
    address, security = address_and_tls(args.address, args.tls, "ADDRESS")
    slots = args.slots or os.cpu_count() or 1
    if slots < 1:
        raise InputError("--slots", "a number of point slots >= 1", slots)
    name = check_name(args.name or f"{socket.gethostname()}-{os.getpid()}", "--name")
    host = args.host
    if host is None:
        sched_host = address.split("://", 1)[1].rsplit(":", 1)[0]
        if not is_loopback(sched_host):
            raise InputError("--host", f"this machine's address on the network that reaches {address} (a worker "
                                       f"listens on {LOOPBACK} unless told, where no other machine reaches it)",
                             "none")
        host = LOOPBACK
    check_host(host)
    local_directory = None
    if args.local_directory:
        local_directory = os.path.abspath(args.local_directory)
        if not os.path.isdir(local_directory):
            raise InputError("--local-directory", "an existing folder for the points' scratch runs",
                             args.local_directory)
    emulator = can_emulate() and not args.no_emulator
    _probe(address, args.connect_timeout_s, "ADDRESS", security)
    why = "" if emulator else (" (--no-emulator)" if args.no_emulator else " (needs root and Open vSwitch)")
    print(f"dtnet worker {name}: joining {address}: {slots} point slot(s) for flow points; "
          + ("emulator points one at a time (resource emulator=1)" if emulator else f"no emulator points{why}")
          + f"; listening on {host}", flush=True)
    if warning := exposure(f"dtnet worker {name}", host, args.tls):
        print(warning, file=sys.stderr, flush=True)
    argv = worker_argv(address, slots=slots, name=name, emulator=emulator, host=host,
                       local_directory=local_directory, tls_dir=args.tls)
    exec_closed(argv)
    return 0  # not reached


def cmd_scheduler(args) -> int:
    need_dask("dtnet scheduler")
    from dtnet.cluster import tls
    for flag, port in (("--port", args.port), ("--dashboard-port", args.dashboard_port)):
        if not 0 <= port < 65536:
            raise InputError(flag, "a TCP port 0..65535", port)
    host = check_host(args.host)
    scheme = "tls" if args.tls else "tcp"
    argv = [sys.executable, "-m", "dtnet.cluster.daskmain", "scheduler"]
    if not args.dashboard:
        argv.append("--no-http")
    argv += ["--host", host, "--port", str(args.port), "--protocol", scheme,
             "--dashboard" if args.dashboard else "--no-dashboard",
             "--dashboard-address", f"{host}:{args.dashboard_port}"]
    if args.tls:
        tls.ensure(args.tls, host)
        argv += tls.dask_args(args.tls)
    env = {**os.environ, "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0"}
    where = f"{scheme}://{host}:{args.port}"
    with_tls = f" --tls {os.path.abspath(args.tls)}" if args.tls else ""
    print(f"dtnet scheduler: {where} (workers: dtnet worker {where}{with_tls}; "
          f"sweeps: dtnet run SWEEP.yaml --cluster {where}{with_tls})"
          + (f"; dashboard http://{host}:{args.dashboard_port}" if args.dashboard else "; no HTTP server"),
          flush=True)
    if warning := exposure("dtnet scheduler", host, args.tls):
        print(warning, file=sys.stderr, flush=True)
    exec_closed(argv, env)
    return 0  # not reached


def register(sub) -> None:
    """The two subcommands, on the dtnet parser's subparsers."""
    s = sub.add_parser("scheduler", help="start a Dask scheduler for cluster sweeps (pip install 'dtnet[cluster]')",
                       description="Starts Dask's scheduler (dask scheduler) for `dtnet run --cluster`, with a "
                                   "point whose worker died left to dtnet (run once more, then failed with the "
                                   "reason). Listens on 127.0.0.1 only unless --host names the lab network's "
                                   "address; no HTTP server unless --dashboard. Beyond loopback, use --tls DIR: "
                                   "without it anyone who reaches the port runs code on the workers. "
                                   "docs/cluster-sweeps.md")
    s.add_argument("--host", default=LOOPBACK,
                   help="address to listen on (default 127.0.0.1: this machine only); this machine's address on "
                        "the lab network for other machines")
    s.add_argument("--port", type=int, default=DEFAULT_PORT, help="TCP port (0: any free one)")
    s.add_argument("--dashboard", action=argparse.BooleanOptionalAction, default=False,
                   help="serve Dask's dashboard (HTTP, no authentication) on --host at --dashboard-port "
                        "(default: no HTTP server at all)")
    s.add_argument("--dashboard-port", type=int, default=8787, metavar="PORT", help="the dashboard's port")
    s.add_argument("--tls", metavar="DIR",
                   help="TLS on every connection (tls:// addresses), with the CA and certificate in DIR; made "
                        "there first when DIR is new or empty (keys 0600). Copy DIR without ca-key.pem to the "
                        "workers and the submitting machine")
    s.set_defaults(func=cmd_scheduler)

    w = sub.add_parser("worker", help="run sweep points for a cluster's scheduler (root for emulator points)",
                       description="Starts a Dask worker for the scheduler at ADDRESS (dask worker, one process) "
                                   "that runs sweep points: a point per slot at once, each slot's points in its "
                                   "own runner process; "
                                   "emulator points one at a time, when this machine can (root and Open "
                                   "vSwitch: it offers the resource emulator=1) and unless --no-emulator. It "
                                   "needs the same dtnet installed as the submitting machine. It listens on "
                                   "127.0.0.1 unless --host says otherwise (needed for a scheduler on another "
                                   "machine; then use --tls DIR too). Exit 2 when ADDRESS does not answer. "
                                   "docs/cluster-sweeps.md")
    w.add_argument("address", metavar="ADDRESS",
                   help="the scheduler, tcp://HOST:PORT or tls://HOST:PORT (HOST:PORT, or HOST for 8786)")
    w.add_argument("--slots", type=int, metavar="K", help="flow points at once (default: this machine's cores)")
    w.add_argument("--name", help="the worker's name in progress lines (default HOSTNAME-PID)")
    w.add_argument("--host", help="address to listen on (default 127.0.0.1, allowed only when the scheduler is "
                                  "on this machine): this machine's address on the network that reaches it")
    w.add_argument("--tls", metavar="DIR", help="the cluster's certificates (ca.pem, cert.pem, key.pem, from "
                                                "`dtnet scheduler --tls DIR`): TLS on every connection")
    w.add_argument("--no-emulator", action="store_true", help="run no emulator points here, even as root")
    w.add_argument("--local-directory", metavar="DIR",
                   help="scratch folder for running points (default: Dask's, under the temp folder)")
    w.add_argument("--connect-timeout-s", type=float, default=CONNECT_TIMEOUT_S, metavar="S",
                   help="how long ADDRESS may take to answer")
    w.set_defaults(func=cmd_worker)
