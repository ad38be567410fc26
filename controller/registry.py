"""Policy names: the built-ins, and any importable class written ``package.module:Class``.

``policy_class(name)`` finds the class; ``make_policy(name, fabric, params)`` builds
one with its params resolved. Everything a user can get wrong here (a name that
is no policy, a module that is missing or fails to import, a class that is not
a ``Policy``, an unknown or out-of-range param) raises ``InputError`` with one line.

``dtnet check`` runs no user code in its own process: inside ``imports_in_child()`` a
``package.module:Class`` whose module is not imported yet is imported, checked and built on
the fabric in a fresh child process with a deadline (docs/writing-a-policy.md). A run
imports it in-process, as it must to use it.
"""
from __future__ import annotations

import contextlib
import importlib
import json
import multiprocessing
import re
import sys
from collections.abc import Mapping

from badinput import InputError
from controller.params import Params, resolve
from controller.policy import Policy
from topologies.fabric import Fabric

DEFAULT_POLICY = "ecmp"  # what a run gets when its experiment names none
BUILTINS = {
    "shortest": "controller.policies.static:Shortest",
    "ecmp": "controller.policies.static:Ecmp",
    "congestion-aware": "controller.policies.congestion:CongestionAware",
    "coschedule": "controller.policies.coschedule:CoSchedule",
    "spray": "controller.policies.static:Spray",
}
_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
EXPECTED = "one of " + ", ".join(BUILTINS) + ", or package.module:Class"
PROBE_TIMEOUT_S = 5.0  # an import that takes longer at check hangs or does more than define a class
_probing = False  # set by imports_in_child()
_probed: dict = {}  # (name, params, fabric) -> (params resolved, coschedules) from a child


def policy_class(name, key: str = "controller.policy", file: str | None = None) -> type[Policy]:
    """The Policy subclass a name stands for."""
    if not isinstance(name, str):
        raise InputError(key, EXPECTED, name, file)
    spec = BUILTINS.get(name, name)
    module, colon, attr = spec.partition(":")
    if not colon or not _DOTTED.fullmatch(module) or not _DOTTED.fullmatch(attr):
        raise InputError(key, EXPECTED, name, file)
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and (module == e.name or module.startswith(e.name + ".")):
            raise InputError(key, f"an importable module {module} (is its folder on PYTHONPATH?)", name,
                             file) from None
        raise InputError(key, f"a module {module} that imports", f"{type(e).__name__}: {e}", file) from None
    except (Exception, SystemExit) as e:  # the user's module failed while importing
        raise InputError(key, f"a module {module} that imports", f"{type(e).__name__}: {e}", file) from None
    obj = mod
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise InputError(key, f"a class {attr} in module {module}", name, file)
    if not (isinstance(obj, type) and issubclass(obj, Policy)):
        what = "a class not derived from Policy" if isinstance(obj, type) else f"a {type(obj).__name__}"
        raise InputError(key, "a subclass of controller.policy.Policy", f"{name} ({what})", file)
    return obj


def resolve_params(name: str, params: Mapping | None, policy_key: str = "controller.policy",
                   params_key: str = "controller.params", file: str | None = None) -> Params:
    """The policy's params as given, checked, with defaults for the rest. The keys name
    where the name and the params were written, for the errors."""
    return resolve(policy_class(name, policy_key, file).PARAMS, params, params_key, file)


@contextlib.contextmanager
def imports_in_child():
    """Within it, checking a user's policy imports its module in a child process only: the
    module's side effects (threads, signal handlers, sys.exit, a hang) stay out of the checker."""
    global _probing
    saved, _probing = _probing, True
    try:
        yield
    finally:
        _probing = saved


def _needs_child(name) -> bool:
    module = BUILTINS.get(name, name).partition(":")[0] if isinstance(name, str) else ""
    return _probing and name not in BUILTINS and module not in sys.modules


def checked_params(name: str, fabric: Fabric, params: Mapping | None = None, policy_key: str = "controller.policy",
                   params_key: str = "controller.params", file: str | None = None) -> dict:
    """Every param of the policy built on the fabric, resolved: make_policy's checks, run in a
    child process within imports_in_child()."""
    if not _needs_child(name):
        return make_policy(name, fabric, params, policy_key, params_key, file).params.to_dict()
    return _probe(name, fabric, params, policy_key, params_key, file)[0]


def coschedules(name: str) -> bool:
    """The policy answers announcements (the jobs announce their phases)."""
    return trait(name, "coschedules")


TRAITS = ("coschedules", "sprays", "static_forwarding")  # what engines read of a policy's class


def trait(name: str, attr: str):
    """One class attribute of the policy (TRAITS): from the child's answer within
    imports_in_child() once checked_params probed it, else from the class itself. A
    static_forwarding comes back as the controller.policy class it names."""
    if _needs_child(name):
        found = [traits for (n, *_), (_, traits) in _probed.items() if n == name]
        if found:
            value = found[0][attr]
            if attr == "static_forwarding" and value is not None:
                from controller import policy as policy_mod
                value = getattr(policy_mod, value)
            return value
    return getattr(policy_class(name), attr)


def _probe(name, fabric, params, policy_key, params_key, file):
    key = (name, json.dumps(params, sort_keys=True, default=repr), fabric.kind, repr(sorted(fabric.params.items())))
    if key in _probed:
        return _probed[key]
    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: nothing of this one is shared
    recv, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_probe_child, args=(send, name, fabric, params, policy_key, params_key, file),
                        daemon=True)
    child.start()
    send.close()
    try:
        if not recv.poll(PROBE_TIMEOUT_S):
            raise InputError(policy_key, f"a module that imports within {PROBE_TIMEOUT_S:g} s",
                             f"{name} (still importing)", file)
        try:
            kind, payload = recv.recv()
        except EOFError:
            child.join(PROBE_TIMEOUT_S)
            raise InputError(policy_key, "a module that imports", f"{name} (the import ended the process, "
                             f"exit status {child.exitcode})", file) from None
    finally:
        if child.is_alive():
            child.kill()
        child.join()
        recv.close()
    if kind == "error":
        raise InputError(*payload)
    _probed[key] = payload
    return payload


def _probe_child(send, name, fabric, params, policy_key, params_key, file):
    """In the child: make_policy's answer, as plain data."""
    try:
        policy = make_policy(name, fabric, params, policy_key, params_key, file)
        cls = type(policy)
        traits = {"coschedules": bool(cls.coschedules), "sprays": bool(cls.sprays),
                  "static_forwarding": cls.static_forwarding.__name__ if cls.static_forwarding else None}
        send.send(("ok", (policy.params.to_dict(), traits)))
    except InputError as e:
        send.send(("error", (e.key, e.expected, e.found, e.file)))
    except BaseException as e:  # noqa: BLE001 - whatever the user's code raises is the answer
        send.send(("error", (policy_key, "a policy that builds", f"{type(e).__name__}: {e}"[:200], file)))


def make_policy(name: str, fabric: Fabric, params: Mapping | None = None, policy_key: str = "controller.policy",
                params_key: str = "controller.params", file: str | None = None) -> Policy:
    """The policy built on the fabric, its params resolved."""
    cls = policy_class(name, policy_key, file)
    resolved = resolve(cls.PARAMS, params, params_key, file)
    try:
        policy = cls(fabric, resolved)
    except InputError:
        raise
    except Exception as e:  # the user's constructor failed on this fabric
        raise InputError(policy_key, f"a policy that builds on this fabric ({fabric.kind})",
                         f"{type(e).__name__}: {e}", file) from None
    policy.name = name
    return policy
