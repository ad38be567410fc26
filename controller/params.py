"""Declared policy parameters: a default, a type and a range side by side (faucet's conf.py, in small).

A policy class lists its tunables in ``PARAMS``::

    PARAMS = {"poll_s": Param(0.5, gt=0, doc="statistics poll period")}

``resolve`` reads what an experiment gives against that list: unknown names,
wrong types and values out of range raise ``InputError`` naming the key, what
was expected and what was found; everything not given takes its default. The
result is a read-only ``Params``: ``params.poll_s``. Names carry their unit
(``_s``, ``_gbps``, ``_bytes``); counts and fractions say what they count.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

from badinput import InputError

_TYPES = (bool, int, float, str)


class Param:
    """One tunable: its default, type (that of the default) and the values it may take.

    ``gt``/``ge``/``lt``/``le`` bound numbers; ``choices`` lists the values a string may take.
    A float param takes an integer too; an int param takes only integers.
    """

    __slots__ = ("default", "type", "gt", "ge", "lt", "le", "choices", "doc")

    def __init__(self, default, *, gt=None, ge=None, lt=None, le=None, choices=None, doc: str = ""):
        if type(default) not in _TYPES:
            raise TypeError(f"Param default {default!r}: expected a bool, int, float or str")
        self.default, self.type = default, type(default)
        self.gt, self.ge, self.lt, self.le = gt, ge, lt, le
        self.choices = tuple(choices) if choices is not None else None
        self.doc = doc
        if self.check(default) is not None:
            raise ValueError(f"Param default {default!r} is outside its own range ({self.expected})")

    @property
    def expected(self) -> str:
        if self.choices is not None:
            return "one of " + ", ".join(map(str, self.choices))
        what = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}[self.type]
        lo = f"{self.ge:g}" if self.ge is not None else f"{self.gt:g} (exclusive)" if self.gt is not None else None
        hi = f"{self.le:g}" if self.le is not None else f"{self.lt:g} (exclusive)" if self.lt is not None else None
        if lo and hi:
            return f"{what} in {lo}..{hi}"
        if lo:
            return f"{what} {'>=' if self.ge is not None else '>'} {self.ge if self.ge is not None else self.gt:g}"
        if hi:
            return f"{what} {'<=' if self.le is not None else '<'} {self.le if self.le is not None else self.lt:g}"
        return what

    def check(self, value) -> str | None:
        """None when value is allowed; else what is expected."""
        if self.type is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        elif self.type is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:
            ok = isinstance(value, self.type)
        if not ok:
            return self.expected
        if self.choices is not None and value not in self.choices:
            return self.expected
        if (self.gt is not None and not value > self.gt) or (self.ge is not None and not value >= self.ge) or \
                (self.lt is not None and not value < self.lt) or (self.le is not None and not value <= self.le):
            return self.expected
        return None

    def describe(self) -> dict:
        return {"default": self.default, "expected": self.expected, "doc": self.doc}


class Params(Mapping):
    """Resolved parameters, read-only: ``p.poll_s`` or ``p["poll_s"]``."""

    __slots__ = ("_values",)

    def __init__(self, values: Mapping | None = None):
        object.__setattr__(self, "_values", dict(values or {}))

    def __getattr__(self, name):
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"no param {name!r} (declared: {', '.join(self._values) or 'none'})") from None

    def __setattr__(self, name, value):
        raise AttributeError("params are read-only once resolved")

    def __getitem__(self, name):
        return self._values[name]

    def __iter__(self):
        return iter(self._values)

    def __len__(self):
        return len(self._values)

    def __repr__(self):
        return f"Params({self._values!r})"

    def to_dict(self) -> dict:
        return dict(self._values)


def resolve(declared: Mapping[str, Param], given: Mapping | None, where: str = "controller.params",
            file: str | None = None) -> Params:
    """Every declared param: the given value, checked, or its default. Unknown names raise."""
    given = {} if given is None else given
    if isinstance(given, Params):
        given = given.to_dict()
    if not isinstance(given, Mapping):
        raise InputError(where, "a mapping of param names to values", given, file)
    for name in given:
        if name not in declared:
            allowed = ", ".join(declared) if declared else "none: this policy takes no params"
            raise InputError(f"{where}.{name}", f"a param of the policy ({allowed})", name, file)
    out = {}
    for name, p in declared.items():
        if name in given:
            value = given[name]
            expected = p.check(value)
            if expected is not None:
                raise InputError(f"{where}.{name}", expected, value, file)
            out[name] = float(value) if p.type is float else value
        else:
            out[name] = p.default
    return Params(out)
