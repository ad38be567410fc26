"""`dtnet scheduler` and `dtnet worker ADDRESS`: Dask's own scheduler and worker, started with
what a dtnet sweep needs, after the checks a person would want first.

Each ends by exec'ing Dask's command (same process, same PID), so signals, logging and
shutdown are Dask's own. What they add:
- the scheduler leaves a point whose worker died to the client (allowed-failures 0: dtnet
  retries it once, then records it failed with the reason) and binds 127.0.0.1 unless told;
- the worker offers one point slot per core, the ``emulator`` resource (1: at most one
  emulator point at a time) when this machine can run the emulator, a unique name, and says
  so; an address that does not answer is exit 2 with one line, not a worker retrying for ever.
"""
from __future__ import annotations

import asyncio
import os
import socket
import sys

from badinput import InputError
from badinput.paths import check_name
from dtnet.cluster.client import CONNECT_TIMEOUT_S, DEFAULT_PORT, can_emulate, need_dask, parse_address


def _probe(address: str, timeout_s: float, flag: str) -> None:
    from distributed.comm import connect

    async def once():
        comm = await connect(address, timeout=timeout_s)
        await comm.close()
    try:
        asyncio.run(once())
    except (OSError, TimeoutError) as e:
        raise InputError(flag, f"a Dask scheduler answering at {address} (start one with `dtnet scheduler`)",
                         f"no answer within {timeout_s:g} s ({type(e).__name__})") from None


def worker_argv(address: str, *, slots: int, name: str, emulator: bool, host: str | None,
                local_directory: str | None) -> list[str]:
    argv = [sys.executable, "-m", "distributed.cli.dask_worker", address, "--nworkers", "1",
            "--nthreads", str(slots), "--name", name, "--no-dashboard"]
    if emulator:
        argv += ["--resources", "emulator=1"]
    if host:
        argv += ["--host", host]
    if local_directory:
        argv += ["--local-directory", local_directory]
    return argv


def cmd_worker(args) -> int:
    need_dask("dtnet worker")
    address = parse_address(args.address, "ADDRESS")
    slots = args.slots or os.cpu_count() or 1
    if slots < 1:
        raise InputError("--slots", "a number of point slots >= 1", slots)
    name = check_name(args.name or f"{socket.gethostname()}-{os.getpid()}", "--name")
    if args.host is not None:
        parse_address(args.host, "--host")  # a host name or address, not a shell word
    local_directory = None
    if args.local_directory:
        local_directory = os.path.abspath(args.local_directory)
        if not os.path.isdir(local_directory):
            raise InputError("--local-directory", "an existing folder for the points' scratch runs",
                             args.local_directory)
    emulator = can_emulate() and not args.no_emulator
    _probe(address, args.connect_timeout_s, "ADDRESS")
    why = "" if emulator else (" (--no-emulator)" if args.no_emulator else " (needs root and Open vSwitch)")
    print(f"dtnet worker {name}: joining {address}: {slots} point slot(s) for flow points; "
          + ("emulator points one at a time (resource emulator=1)" if emulator else f"no emulator points{why}"),
          flush=True)
    argv = worker_argv(address, slots=slots, name=name, emulator=emulator, host=args.host,
                       local_directory=local_directory)
    os.execv(argv[0], argv)
    return 0  # not reached


def cmd_scheduler(args) -> int:
    need_dask("dtnet scheduler")
    if not 0 <= args.port < 65536:
        raise InputError("--port", "a TCP port 0..65535", args.port)
    parse_address(args.host, "--host")
    env = {**os.environ, "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0"}
    print(f"dtnet scheduler: tcp://{args.host}:{args.port} (workers: dtnet worker tcp://{args.host}:{args.port}; "
          f"sweeps: dtnet run SWEEP.yaml --cluster tcp://{args.host}:{args.port})", flush=True)
    argv = [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", args.host, "--port", str(args.port),
            "--no-dashboard"]
    os.execve(argv[0], argv, env)
    return 0  # not reached


def register(sub) -> None:
    """The two subcommands, on the dtnet parser's subparsers."""
    s = sub.add_parser("scheduler", help="start a Dask scheduler for cluster sweeps (pip install 'dtnet[cluster]')",
                       description="Starts Dask's scheduler (dask scheduler) for `dtnet run --cluster`, with a "
                                   "point whose worker died left to dtnet (run once more, then failed with the "
                                   "reason). Binds 127.0.0.1 unless --host names the lab network's address. "
                                   "docs/cluster-sweeps.md")
    s.add_argument("--host", default="127.0.0.1",
                   help="address to listen on: this machine's address on the lab network for other machines")
    s.add_argument("--port", type=int, default=DEFAULT_PORT, help="TCP port (0: any free one)")
    s.set_defaults(func=cmd_scheduler)

    w = sub.add_parser("worker", help="run sweep points for a cluster's scheduler (root for emulator points)",
                       description="Starts a Dask worker for the scheduler at ADDRESS (dask worker, one process) "
                                   "that runs sweep points: a point per slot at once, each slot's points in its "
                                   "own runner process; "
                                   "emulator points one at a time, when this machine can (root and Open "
                                   "vSwitch: it offers the resource emulator=1) and unless --no-emulator. It "
                                   "needs the same dtnet installed as the submitting machine. Exit 2 when "
                                   "ADDRESS does not answer. docs/cluster-sweeps.md")
    w.add_argument("address", metavar="ADDRESS", help="the scheduler, tcp://HOST:PORT (HOST:PORT, or HOST for 8786)")
    w.add_argument("--slots", type=int, metavar="K", help="flow points at once (default: this machine's cores)")
    w.add_argument("--name", help="the worker's name in progress lines (default HOSTNAME-PID)")
    w.add_argument("--host", help="address to listen on (default: the one that reaches the scheduler)")
    w.add_argument("--no-emulator", action="store_true", help="run no emulator points here, even as root")
    w.add_argument("--local-directory", metavar="DIR",
                   help="scratch folder for running points (default: Dask's, under the temp folder)")
    w.add_argument("--connect-timeout-s", type=float, default=CONNECT_TIMEOUT_S, metavar="S",
                   help="how long ADDRESS may take to answer")
    w.set_defaults(func=cmd_worker)
