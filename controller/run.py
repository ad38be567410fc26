"""Start the dtnet controller (Ryu) for one fabric.

  python -m controller.run --fabric FABRIC.json --routing ecmp --ofp-port 6653 \\
      --rest-host 127.0.0.1 --rest-port 8080 [--log-file F]
  python -m controller.run ryu-manager [ryu-manager arguments...]

The second form is bare ``ryu-manager`` with the eventlet shim applied first.
"""
from __future__ import annotations

import argparse
import os
import sys

APP = "controller.ryu_app"


def shim_eventlet() -> None:
    """Ryu 4.34's wsgi module imports eventlet.wsgi.ALREADY_HANDLED, which
    eventlet 0.33 no longer defines; any sentinel object will do."""
    import eventlet.wsgi
    if not hasattr(eventlet.wsgi, "ALREADY_HANDLED"):
        eventlet.wsgi.ALREADY_HANDLED = object()


def _port(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a TCP port number, found {text!r}") from None
    if not 1 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"expected a TCP port 1..65535, found {n}")
    return n


def parse_args(argv: list[str]) -> argparse.Namespace:
    from controller.routing import DEFAULT_POLICY, POLICIES

    ap = argparse.ArgumentParser(prog="python -m controller.run", description="dtnet Ryu controller")
    ap.add_argument("--fabric", required=True, help="fabric JSON written by Fabric.dump")
    ap.add_argument("--routing", default=DEFAULT_POLICY,
                    help=f"{' | '.join(POLICIES)} (default {DEFAULT_POLICY})")
    ap.add_argument("--ofp-host", default="127.0.0.1", help="OpenFlow listen address (default 127.0.0.1)")
    ap.add_argument("--ofp-port", type=_port, default=6653)
    ap.add_argument("--rest-host", default="127.0.0.1")
    ap.add_argument("--rest-port", type=_port, default=8080)
    ap.add_argument("--poll-s", type=float, default=None, help="statistics poll period (default 0.5)")
    ap.add_argument("--link-scale", type=float, default=None,
                    help="emulated link rate / real link rate, for loads in real Gb/s (default 1)")
    ap.add_argument("--hold-s", type=float, default=None, help="minimum time between moves of a flow (default 2)")
    ap.add_argument("--log-file", default=None)
    return ap.parse_args(argv)


def check_inputs(fabric_path: str, routing: str, **cfg) -> None:
    """Fail before Ryu starts, with one line, on a bad fabric, routing name or setting."""
    from badinput import InputError
    from controller.flows import CongestionConfig
    from controller.routing import check_policy
    from topologies.fabric import Fabric
    try:
        check_policy(routing)
        CongestionConfig(**{k: v for k, v in cfg.items() if v is not None})
    except ValueError as e:
        raise SystemExit(f"controller: {e}") from None
    try:
        Fabric.load(fabric_path)
    except InputError as e:
        raise SystemExit(f"controller: {e}") from None
    except (OSError, ValueError, KeyError) as e:
        raise SystemExit(f"controller: {fabric_path}: expected a fabric JSON: {e}") from None


def ryu_argv(args: argparse.Namespace) -> list[str]:
    out = ["--ofp-listen-host", args.ofp_host, "--ofp-tcp-listen-port", str(args.ofp_port),
           "--wsapi-host", args.rest_host, "--wsapi-port", str(args.rest_port)]
    if args.log_file:
        out += ["--log-file", args.log_file]
    return out + [APP]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["ryu-manager"]:
        shim_eventlet()
        from ryu.cmd import manager
        return manager.main(args=argv[1:], prog="ryu-manager")
    args = parse_args(argv)
    try:
        check_inputs(args.fabric, args.routing, poll_s=args.poll_s, link_scale=args.link_scale, hold_s=args.hold_s)
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    os.environ["DTNET_FABRIC"] = os.path.abspath(args.fabric)
    os.environ["DTNET_ROUTING"] = args.routing
    for var, value in (("DTNET_POLL_S", args.poll_s), ("DTNET_LINK_SCALE", args.link_scale),
                       ("DTNET_HOLD_S", args.hold_s)):
        if value is not None:
            os.environ[var] = repr(value)
    shim_eventlet()
    from ryu.cmd import manager
    return manager.main(args=ryu_argv(args), prog="dtnet-controller")


if __name__ == "__main__":
    sys.exit(main())
