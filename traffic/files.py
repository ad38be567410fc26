"""Reading input files so that every failure is one InputError line naming the file."""
from __future__ import annotations

import json

from badinput import InputError


def read_json(path, key: str):
    """The parsed JSON of `path`; `key` names what the file is for in the error."""
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as e:
        raise InputError(key, "a readable file", e.strerror, file=str(path)) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(key, "JSON", f"invalid JSON ({str(e)[:60]})", file=str(path)) from None
    except RecursionError:
        raise InputError(key, "JSON", "arrays or objects nested too deep to read", file=str(path)) from None
