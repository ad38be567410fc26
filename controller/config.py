"""The controller process's one configuration file: fabric, policy, params, where to listen.

The testbed writes it into the run folder (``controller.json``) and starts
``python -m controller.run controller.json``; a person can start the same
controller by hand from it. Version 1, JSON, every key checked::

    {"version": 1,
     "fabric": "fabric.json",                        # Fabric.dump output, relative to this file
     "policy": {"name": "congestion-aware", "params": {"poll_s": 0.5}},
     "link_scale": 2.5e-05,                          # emulated link rate / real rate
     "openflow": {"host": "127.0.0.1", "port": 6653},
     "rest": {"host": "127.0.0.1", "port": 8080},
     "log_file": "controller.log"}                   # optional, relative to this file

``load`` raises InputError (one line: file, key, expected, found) on anything wrong,
including an unknown policy or param, before Ryu starts.
"""
from __future__ import annotations

import ipaddress
import json
import math
import os
from dataclasses import dataclass, field

from badinput import InputError
from badinput.files import read_json
from controller.registry import DEFAULT_POLICY, resolve_params

CONFIG_VERSION = 1
_KEYS = ("version", "fabric", "policy", "link_scale", "openflow", "rest", "log_file")


@dataclass(frozen=True)
class ControllerConfig:
    fabric: str                       # path of the fabric JSON, or a fabric spec (fat-tree:k=4)
    policy: str = DEFAULT_POLICY
    params: dict = field(default_factory=dict)  # resolved: every declared param with its value
    link_scale: float = 1.0
    ofp_host: str = "127.0.0.1"
    ofp_port: int = 6653
    rest_host: str = "127.0.0.1"
    rest_port: int = 8080
    log_file: str | None = None
    version: int = CONFIG_VERSION

    def to_dict(self, base_dir: str | None = None) -> dict:
        """The file's contents; paths relative to base_dir when they lie under it."""
        def rel(p):
            if p is None or base_dir is None:
                return p
            if not os.path.exists(p) and p != self.log_file:
                return p  # a fabric spec
            r = os.path.relpath(os.path.abspath(p), os.path.abspath(base_dir))
            return p if r.startswith(os.pardir) else r
        out = {"version": self.version, "fabric": rel(self.fabric),
               "policy": {"name": self.policy, "params": dict(self.params)},
               "link_scale": self.link_scale,
               "openflow": {"host": self.ofp_host, "port": self.ofp_port},
               "rest": {"host": self.rest_host, "port": self.rest_port}}
        if self.log_file is not None:
            out["log_file"] = rel(self.log_file)
        return out

    def write(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.to_dict(os.path.dirname(os.path.abspath(path))), f, indent=1)
            f.write("\n")


def make(fabric: str, policy: str = DEFAULT_POLICY, params: dict | None = None, file: str | None = None,
         keys: tuple[str, str] = ("policy.name", "policy.params"), check_fabric: bool = True,
         **listen) -> ControllerConfig:
    """A checked configuration: the fabric readable (unless the caller just wrote it), the
    policy's params resolved, listen addresses and ports valid. ``keys`` name the policy
    and its params in errors."""
    resolved = resolve_params(policy, params, keys[0], keys[1], file)
    if os.path.exists(fabric) or not check_fabric:
        fabric = os.path.abspath(fabric)
    cfg = ControllerConfig(fabric, policy, resolved.to_dict(), **listen)
    if check_fabric:
        load_fabric(cfg.fabric, file)
    _check_listen(cfg, file)
    return cfg


def load_fabric(fabric: str, file: str | None = None):
    """The Fabric a configuration names: a fabric JSON, or else a fabric spec."""
    from topologies import from_spec
    from topologies.fabric import Fabric
    if not os.path.exists(fabric) and ":" in fabric and "/" not in fabric:
        try:
            return from_spec(fabric)
        except InputError as e:
            raise InputError("fabric", f"a fabric JSON or spec ({e})", fabric, file) from None
    try:
        return Fabric.load(fabric)
    except InputError as e:  # the fabric file's own problem, said from the configuration
        raise InputError("fabric", "a readable fabric JSON", f"{fabric}: {e.found}", file) from None
    except OSError as e:
        raise InputError("fabric", "a readable fabric JSON", f"{fabric}: {e.strerror}", file) from None
    except (ValueError, KeyError, TypeError) as e:
        raise InputError("fabric", "a fabric JSON (Fabric.dump)", f"{fabric}: {type(e).__name__}: {e}",
                         file) from None


def load(path: str) -> ControllerConfig:
    return parse(read_json(path, "file"), path)  # a regular file, read to a bound


def parse(data, path: str | None = None) -> ControllerConfig:
    base = os.path.dirname(os.path.abspath(path)) if path else os.getcwd()
    if not isinstance(data, dict):
        raise InputError("top level", "a JSON object", type(data).__name__, path)
    for k in data:
        if k not in _KEYS:
            raise InputError(k, "one of " + ", ".join(_KEYS), k, path)
    if type(data.get("version")) is not int or data["version"] != CONFIG_VERSION:  # not true for 1
        raise InputError("version", str(CONFIG_VERSION), data.get("version"), path)
    fabric = data.get("fabric")
    if not isinstance(fabric, str) or not fabric:
        raise InputError("fabric", "the path of a fabric JSON", fabric, path)
    pol = data.get("policy", {"name": DEFAULT_POLICY})
    if not isinstance(pol, dict) or set(pol) - {"name", "params"} or not isinstance(pol.get("name"), str):
        raise InputError("policy", "an object {name, params}", pol, path)
    scale = data.get("link_scale", 1.0)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not (math.isfinite(scale) and 0 < scale <= 1):
        raise InputError("link_scale", "a factor in (0, 1]", scale, path)
    listen = {}
    for key, default_port in (("openflow", 6653), ("rest", 8080)):
        sec = data.get(key, {})
        if not isinstance(sec, dict) or set(sec) - {"host", "port"}:
            raise InputError(key, "an object {host, port}", sec, path)
        prefix = "ofp" if key == "openflow" else "rest"
        listen[f"{prefix}_host"] = sec.get("host", "127.0.0.1")
        listen[f"{prefix}_port"] = sec.get("port", default_port)
    log = data.get("log_file")
    if log is not None and (not isinstance(log, str) or not log):
        raise InputError("log_file", "a file path", log, path)
    if os.path.exists(os.path.join(base, fabric)):
        fabric = os.path.join(base, fabric)
    return make(fabric, pol["name"], pol.get("params"), path, link_scale=float(scale),
                log_file=os.path.join(base, log) if log else None, **listen)


def _check_listen(cfg: ControllerConfig, file) -> None:
    for key, host, port in (("openflow", cfg.ofp_host, cfg.ofp_port), ("rest", cfg.rest_host, cfg.rest_port)):
        try:
            if not isinstance(host, str):
                raise ValueError(host)
            ipaddress.ip_address(host)
        except ValueError:
            raise InputError(f"{key}.host", "an IP address to listen on", host, file) from None
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise InputError(f"{key}.port", "a TCP port 1..65535", port, file)
