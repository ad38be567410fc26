"""A check of JSON values against docs/rest-api.yaml (the OpenAPI 3.0 subset it uses): types,
nullable, enum, required, properties, additionalProperties, items, bounds, $ref."""
from __future__ import annotations

import os

import yaml

SPEC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "rest-api.yaml")
_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "integer": int, "number": (int, float)}


def load_spec(path: str = SPEC) -> dict:
    with open(path) as f:
        return yaml.safe_load(f)


def schema(spec: dict, path: str, method: str, status: str | None = None) -> dict:
    """The response schema of one operation (status given), or its request schema."""
    op = spec["paths"][path][method]
    if status is None:
        return op["requestBody"]["content"]["application/json"]["schema"]
    return op["responses"][status]["content"]["application/json"]["schema"]


def errors(spec: dict, sch: dict, value, where: str = "$") -> list[str]:
    """What is wrong with value under sch (empty: it conforms)."""
    if "$ref" in sch:
        name = sch["$ref"].rsplit("/", 1)[1]
        return errors(spec, spec["components"]["schemas"][name], value, where)
    if value is None:
        return [] if sch.get("nullable") else [f"{where}: null where {sch.get('type')} is expected"]
    t = sch.get("type")
    if t is not None:
        ok = isinstance(value, _TYPES[t]) and not (isinstance(value, bool) and t in ("integer", "number"))
        if not ok:
            return [f"{where}: expected {t}, found {type(value).__name__}"]
    out = []
    if "enum" in sch and value not in sch["enum"]:
        out.append(f"{where}: {value!r} not in {sch['enum']}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        lo = sch.get("minimum")
        if lo is not None and (value < lo or (sch.get("exclusiveMinimum") and value == lo)):
            out.append(f"{where}: {value} below {lo}")
        if "maximum" in sch and value > sch["maximum"]:
            out.append(f"{where}: {value} above {sch['maximum']}")
    if isinstance(value, str):
        if len(value) < sch.get("minLength", 0) or len(value) > sch.get("maxLength", len(value)):
            out.append(f"{where}: length {len(value)} out of bounds")
    if isinstance(value, list):
        if len(value) < sch.get("minItems", 0) or len(value) > sch.get("maxItems", len(value)):
            out.append(f"{where}: {len(value)} items out of bounds")
        if "items" in sch:
            for i, item in enumerate(value):
                out += errors(spec, sch["items"], item, f"{where}[{i}]")
    if isinstance(value, dict):
        props = sch.get("properties", {})
        for k in sch.get("required", []):
            if k not in value:
                out.append(f"{where}: {k} missing")
        extra = sch.get("additionalProperties", True)
        for k, v in value.items():
            if k in props:
                out += errors(spec, props[k], v, f"{where}.{k}")
            elif extra is False:
                out.append(f"{where}: {k} is not in the schema")
            elif isinstance(extra, dict):
                out += errors(spec, extra, v, f"{where}.{k}")
    return out
