"""Start the dtnet controller (Ryu) for one fabric and one policy.

  python -m controller.run CONFIG.json                 # the configuration file the testbed writes
  python -m controller.run --fabric fat-tree:k=4 --policy congestion-aware --param hold_s=1 \\
      --ofp-port 6653 --rest-port 8080 [--log-file F]  # the same, from flags (--print-config shows the file)
  python -m controller.run --check CONFIG.json         # validate only: exit 0, or 2 with one line
  python -m controller.run ryu-manager [ryu-manager arguments...]

Bare ``ryu-manager`` crashes on this Python (Ryu 4.34, eventlet 0.33) without a
shim; the last form is ryu-manager with the shim applied, for Ryu's own apps.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import yaml

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


def _param(text: str) -> tuple[str, object]:
    name, eq, value = text.partition("=")
    if not eq or not name:
        raise argparse.ArgumentTypeError(f"expected name=value, found {text!r}")
    try:
        return name, yaml.safe_load(value)
    except yaml.YAMLError:
        return name, value


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m controller.run", description="dtnet Ryu controller",
                                 epilog="Either CONFIG (a controller configuration file) or --fabric.")
    ap.add_argument("config", nargs="?", help="controller configuration JSON (what the testbed writes)")
    ap.add_argument("--check", action="store_true", help="validate the configuration, start nothing")
    ap.add_argument("--print-config", action="store_true", help="print the configuration as a file, start nothing")
    ap.add_argument("--fabric", help="fabric JSON (Fabric.dump) or a fabric spec such as fat-tree:k=4")
    ap.add_argument("--policy", "--routing", dest="policy", default=None,
                    help="shortest | ecmp | congestion-aware | coschedule | package.module:Class (default ecmp)")
    ap.add_argument("--param", type=_param, action="append", default=[], metavar="NAME=VALUE",
                    help="a policy param, repeatable (e.g. poll_s=0.25)")
    ap.add_argument("--link-scale", type=float, default=None,
                    help="emulated link rate / real link rate, for loads in real Gb/s (default 1)")
    ap.add_argument("--ofp-host", default="127.0.0.1", help="OpenFlow listen address (default 127.0.0.1)")
    ap.add_argument("--ofp-port", type=_port, default=6653)
    ap.add_argument("--rest-host", default="127.0.0.1")
    ap.add_argument("--rest-port", type=_port, default=8080)
    ap.add_argument("--log-file", default=None)
    args = ap.parse_args(argv)
    if (args.config is None) == (args.fabric is None):
        ap.error("give either CONFIG or --fabric")
    return args


def config_from_args(args: argparse.Namespace):
    """The ControllerConfig the arguments stand for (InputError when it is bad)."""
    from controller import config
    from controller.registry import DEFAULT_POLICY
    if args.config is not None:
        return config.load(args.config)
    return config.make(args.fabric, args.policy or DEFAULT_POLICY, dict(args.param), keys=("--policy", "--param"),
                       link_scale=args.link_scale if args.link_scale is not None else 1.0,
                       ofp_host=args.ofp_host, ofp_port=args.ofp_port, rest_host=args.rest_host,
                       rest_port=args.rest_port, log_file=args.log_file)


def check_inputs(fabric_path: str, policy: str, **params) -> None:
    """Fail before Ryu starts, with one line, on a bad fabric, policy or param."""
    from badinput import InputError
    from controller import config
    try:
        config.make(fabric_path, policy, {k: v for k, v in params.items() if v is not None},
                    keys=("--policy", "--param"))
    except InputError as e:
        raise SystemExit(f"controller: {e}") from None


def ryu_argv(cfg) -> list[str]:
    """ryu-manager's arguments for a configuration (or the parsed flags)."""
    out = ["--ofp-listen-host", cfg.ofp_host, "--ofp-tcp-listen-port", str(cfg.ofp_port),
           "--wsapi-host", cfg.rest_host, "--wsapi-port", str(cfg.rest_port)]
    if cfg.log_file:
        out += ["--log-file", cfg.log_file]
    return out + [APP]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["ryu-manager"]:
        shim_eventlet()
        from ryu.cmd import manager
        return manager.main(args=argv[1:], prog="ryu-manager")
    from badinput import InputError
    args = parse_args(argv)
    from controller import config
    try:
        cfg = config_from_args(args)
        fabric = config.load_fabric(cfg.fabric)
    except InputError as e:
        print(f"controller: {e}", file=sys.stderr)
        return 2
    if args.check:
        return 0
    if args.print_config:
        json.dump(cfg.to_dict(), sys.stdout, indent=1)
        print()
        return 0
    shim_eventlet()
    from controller import ryu_app
    ryu_app.configure(cfg, fabric)
    from ryu.cmd import manager
    return manager.main(args=ryu_argv(cfg), prog="dtnet-controller")


if __name__ == "__main__":
    sys.exit(main())
