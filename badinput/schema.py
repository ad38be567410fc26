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
        return _reader(cls)(data, key)
    except InputError as e:
        if file is None or e.file is not None:
            raise
        raise InputError(e.key, e.expected, e.found, file) from None


def from_json(cls, text: str, file=None):
    try:
        data = json.loads(text)
    except ValueError as e:
        raise InputError("json", "valid JSON", str(e)[:80], file) from None
    except RecursionError:
        raise InputError("json", "JSON nested a few levels deep", "nesting too deep to read", file) from None
    return from_dict(cls, data, file)


def _at(key: str, name) -> str:
    return f"{key}.{name}" if key else str(name)


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
        def read(v, key):
            if not isinstance(v, bool):
                raise InputError(key, "true or false", v)
            return v
    elif tp is int:
        def read(v, key):
            if isinstance(v, bool) or not isinstance(v, int):
                raise InputError(key, "an integer", v)
            return v
    elif tp is float:
        def read(v, key):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise InputError(key, "a finite number", v)
            return float(v)
    elif tp is str:
        def read(v, key):
            if not isinstance(v, str):
                raise InputError(key, "a string", v)
            return v
    elif tp is dict:
        def read(v, key):
            if not isinstance(v, dict):
                raise InputError(key, "a mapping", v)
            return v
    elif origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if len(inner) != 1 or len(args) != 2:
            raise TypeError(f"only X | None unions are contract types, not {tp}")
        item = _reader(inner[0])

        def read(v, key):
            return None if v is None else item(v, key)
    elif origin is tuple:
        if len(args) != 2 or args[1] is not Ellipsis:
            raise TypeError(f"only tuple[X, ...] is a contract type, not {tp}")
        item = _reader(args[0])

        def read(v, key):
            if not isinstance(v, list):
                raise InputError(key, "a list", v)
            return tuple(item(x, f"{key}[{i}]") for i, x in enumerate(v))
    elif origin is dict:
        k_tp, v_item = args[0], _reader(args[1])
        if k_tp not in (str, int):
            raise TypeError(f"dict keys are str or int in a contract, not {k_tp}")

        def read(v, key):
            if not isinstance(v, dict):
                raise InputError(key, "a mapping", v)
            out = {}
            for k, x in v.items():
                if k_tp is int:
                    if not (isinstance(k, str) and k.lstrip("-").isdigit()):
                        raise InputError(_at(key, k), "an integer key", k)
                    out[int(k)] = v_item(x, _at(key, k))
                else:
                    out[k] = v_item(x, _at(key, k))
            return out
    elif dataclasses.is_dataclass(tp):
        return _contract_reader(tp)
    else:
        raise TypeError(f"{tp} is not a contract type")
    return read


def _contract_reader(cls):
    def read(v, key):
        if not isinstance(v, dict):
            raise InputError(key or "top level", f"a JSON object ({cls.__name__})", v)
        fields = _fields(cls)
        names = {name for name, _, _ in fields}
        for k in v:
            if k not in names:
                raise InputError(_at(key, k), f"no such key in {cls.__name__} (allowed: {', '.join(sorted(names))})",
                                 k)
        if "version" in names:
            want = cls.__dataclass_fields__["version"].default
            if v.get("version") != want:
                raise InputError(_at(key, "version"), f"{cls.__name__} version {want}", v.get("version"))
        values = {}
        for name, reader, default in fields:
            if name in v:
                values[name] = reader(v[name], _at(key, name))
            elif default is dataclasses.MISSING:
                raise InputError(_at(key, name), "a value", "nothing")
        obj = cls(**values)
        check = getattr(obj, "check", None)
        if check is not None:
            try:
                check()
            except InputError as e:
                raise InputError(_at(key, e.key), e.expected, e.found) from None
        return obj
    return read
