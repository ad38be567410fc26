"""Policy names: the built-ins, and any importable class written ``package.module:Class``.

``policy_class(name)`` finds the class; ``make_policy(name, fabric, params)`` builds
one with its params resolved. Everything a user can get wrong here (a name that
is no policy, a module that is missing or fails to import, a class that is not
a ``Policy``, an unknown or out-of-range param) raises ``InputError`` with one line.
"""
from __future__ import annotations

import importlib
import re
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
