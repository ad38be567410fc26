"""Contracts between processes: frozen dataclasses with a version, to and from JSON, checked on read.

A contract class is a frozen dataclass whose fields say their types, with a ``version``
field whose default is the version this code writes. ``to_dict`` gives its JSON form;
``from_dict`` reads one back and refuses, as an InputError naming the key:
- another version, an unknown key, a missing one;
- a value of the wrong type (annotations: int, float, str, bool, ``X | None``,
  ``tuple[X, ...]``, ``dict[K, V]``, ``dict`` for a mapping passed on as it is, and
  nested contract classes);
- whatever the class's own ``check()`` refuses (ranges, relations between fields).

Stdlib only: the agents read their plans with it. The contracts themselves are in
docs/contracts.md.
"""
from __future__ import annotations

import dataclasses
import json
import math
import types
import typing

from badinput import InputError

_READERS: dict = {}   # type -> reader(value, key) -> value
_FIELDS: dict = {}    # contract class -> [(name, reader, default or MISSING)]


def to_dict(obj, skip_defaults: bool = False):
    """The JSON form of a contract object (tuples become lists, dict keys strings), version first.
    skip_defaults leaves out fields that hold their default (a plan file is smaller without them)."""
    if dataclasses.is_dataclass(obj):
        out = {"version": obj.version} if hasattr(obj, "version") else {}
        for name, _, default in _fields(type(obj)):
            value = getattr(obj, name)
            if name != "version" and not (skip_defaults and value == default):
                out[name] = to_dict(value, skip_defaults)
        return out
    if isinstance(obj, (tuple, list)):
        return [to_dict(x, skip_defaults) for x in obj]
    if isinstance(obj, dict):
        return {(k if isinstance(k, str) else str(k)): to_dict(v, skip_defaults) for k, v in obj.items()}
    return obj


def to_json(obj, skip_defaults: bool = False) -> str:
    return json.dumps(to_dict(obj, skip_defaults), separators=(",", ":"))


def from_dict(cls, data, file=None, key: str = ""):
    """A cls read from its JSON form; InputError(file, key, expected, found) at the first fault."""
    try:
        return _reader(cls)(data)
    except _Fault as f:
        raise InputError(_join(key, reversed(f.parts)) or "top level", f.expected, f.found, file) from None


def from_json(cls, text: str, file=None):
    try:
        data = json.loads(text)
    except ValueError as e:
        raise InputError("json", "valid JSON", str(e)[:80], file) from None
    except RecursionError:
        raise InputError("json", "JSON nested a few levels deep", "nesting too deep to read", file) from None
    return from_dict(cls, data, file)


class _Fault(Exception):
    """A fault deep inside a value; each reader on the way out adds its part of the key, so a
    value that reads cleanly builds no key strings (plans hold tens of thousands of values)."""

    def __init__(self, expected, found, part=None):
        self.expected, self.found, self.parts = expected, found, [] if part is None else [part]


def _join(key: str, parts) -> str:
    out = key
    for p in parts:
        out = f"{out}[{p}]" if isinstance(p, int) else (f"{out}.{p}" if out else str(p))
    return out


def _fields(cls) -> list:
    if cls not in _FIELDS:
        hints = typing.get_type_hints(cls)
        _FIELDS[cls] = [(f.name, _reader(hints[f.name]),
                         f.default if f.default is not dataclasses.MISSING else
                         f.default_factory() if f.default_factory is not dataclasses.MISSING else dataclasses.MISSING)
                        for f in dataclasses.fields(cls)]
    return _FIELDS[cls]


def _reader(tp):
    if tp not in _READERS:
        _READERS[tp] = _make_reader(tp)
    return _READERS[tp]


def _make_reader(tp):
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is bool:
        def read(v):
            if not isinstance(v, bool):
                raise _Fault("true or false", v)
            return v
    elif tp is int:
        def read(v):
            if v.__class__ is not int:  # bool is an int subclass, and not a count
                raise _Fault("an integer", v)
            return v
    elif tp is float:
        def read(v):
            if (v.__class__ is not float and v.__class__ is not int) or not math.isfinite(v):
                raise _Fault("a finite number", v)
            return float(v)
    elif tp is str:
        def read(v):
            if not isinstance(v, str):
                raise _Fault("a string", v)
            return v
    elif tp is dict:
        def read(v):
            if not isinstance(v, dict):
                raise _Fault("a mapping", v)
            return v
    elif origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if len(inner) != 1 or len(args) != 2:
            raise TypeError(f"only X | None unions are contract types, not {tp}")
        item = _reader(inner[0])

        def read(v):
            return None if v is None else item(v)
    elif origin is tuple:
        if len(args) != 2 or args[1] is not Ellipsis:
            raise TypeError(f"only tuple[X, ...] is a contract type, not {tp}")
        item = _reader(args[0])

        def read(v):
            if not isinstance(v, list):
                raise _Fault("a list", v)
            try:
                return tuple(map(item, v))
            except _Fault as f:
                f.parts.append(next(i for i, x in enumerate(v) if _fails(item, x)))
                raise
    elif origin is dict:
        k_tp, v_item = args[0], _reader(args[1])
        if k_tp not in (str, int):
            raise TypeError(f"dict keys are str or int in a contract, not {k_tp}")

        def read(v):
            if not isinstance(v, dict):
                raise _Fault("a mapping", v)
            out = {}
            for k, x in v.items():
                if k_tp is int and not (isinstance(k, str) and k.lstrip("-").isdigit()):
                    raise _Fault("an integer key", k, k)
                try:
                    out[int(k) if k_tp is int else k] = v_item(x)
                except _Fault as f:
                    f.parts.append(k)
                    raise
            return out
    elif dataclasses.is_dataclass(tp):
        return _contract_reader(tp)
    else:
        raise TypeError(f"{tp} is not a contract type")
    return read


def _fails(item, x) -> bool:
    try:
        item(x)
    except _Fault:
        return True
    return False


def _contract_reader(cls):
    name = cls.__name__
    want = cls.__dataclass_fields__["version"].default if "version" in cls.__dataclass_fields__ else None

    def read(v):
        if not isinstance(v, dict):
            raise _Fault(f"a JSON object ({name})", v)
        fields = _fields(cls)
        if len(v) > len(fields) or any(k not in cls.__dataclass_fields__ for k in v):
            k = next(k for k in v if k not in cls.__dataclass_fields__)
            raise _Fault(f"no such key in {name} (allowed: {', '.join(sorted(cls.__dataclass_fields__))})", k, k)
        if want is not None and v.get("version") != want:
            raise _Fault(f"{name} version {want}", v.get("version"), "version")
        values = {}
        for field_name, reader, default in fields:
            if field_name in v:
                try:
                    values[field_name] = reader(v[field_name])
                except _Fault as f:
                    f.parts.append(field_name)
                    raise
            elif default is dataclasses.MISSING:
                raise _Fault("a value", "nothing", field_name)
        obj = cls(**values)
        check = getattr(obj, "check", None)
        if check is not None:
            try:
                check()
            except InputError as e:
                raise _Fault(e.expected, e.found, e.key) from None
        return obj
    return read
