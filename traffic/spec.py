"""Reading the experiment file's `workload:` mapping: typed keys, defaults, no unknown keys."""
from __future__ import annotations

from badinput import InputError
from traffic.limits import is_finite_number

_MISSING = object()


class SpecReader:
    """Takes keys out of a mapping one by one; `done()` rejects whatever nobody asked for."""

    def __init__(self, spec, prefix="workload", file=None):
        if not isinstance(spec, dict):
            raise InputError(prefix, "a mapping", type(spec).__name__, file=file)
        self.spec, self.prefix, self.file = spec, prefix, file
        self.used: set = set()

    def key(self, name):
        return f"{self.prefix}.{name}"

    def error(self, name, expected, found):
        return InputError(self.key(name), expected, found, file=self.file)

    def has(self, name):
        return name in self.spec

    def get(self, name, default=_MISSING):
        self.used.add(name)
        if name not in self.spec:
            if default is _MISSING:
                raise self.error(name, "a value", "nothing")
            return default
        return self.spec[name]

    def int(self, name, default=_MISSING, minimum=None, maximum=None):
        v = self.get(name, default)
        if v is None and default is None:
            return None
        if not isinstance(v, int) or isinstance(v, bool) or \
                (minimum is not None and v < minimum) or (maximum is not None and v > maximum):
            bounds = [f">= {minimum}"] * (minimum is not None) + [f"<= {maximum}"] * (maximum is not None)
            raise self.error(name, " ".join(["an integer"] + [" and ".join(bounds)] * bool(bounds)), v)
        return v

    def number(self, name, default=_MISSING, minimum=0.0, strict=False, maximum=None):
        v = self.get(name, default)
        if v is None and default is None:
            return None
        if not is_finite_number(v) or v < minimum or (strict and v == minimum) or \
                (maximum is not None and v > maximum):
            bound = f"a number {'>' if strict else '>='} {minimum}"
            raise self.error(name, bound if maximum is None else f"{bound} and <= {maximum:g}", v)
        return float(v)

    def choice(self, name, choices, default=_MISSING):
        v = self.get(name, default)
        if v not in choices:
            raise self.error(name, "one of " + ", ".join(map(str, choices)), v)
        return v

    def str(self, name, default=_MISSING):
        v = self.get(name, default)
        if v is None and default is None:
            return None
        if not isinstance(v, str) or not v:
            raise self.error(name, "a non-empty string", v)
        return v

    def done(self, allowed_hint=None):
        unknown = sorted(set(self.spec) - self.used, key=str)
        if unknown:
            known = ", ".join(sorted(allowed_hint or self.used))
            raise self.error(unknown[0], f"a known key ({known})", "an unknown key")
