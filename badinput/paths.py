"""Names that become paths, and paths that must stay inside their run folder.

A run writes as root. Whatever a user names that becomes a file or folder name
(an experiment, a job, a sweep point, a captured link) passes check_name; and
every file a run writes is named through inside(), which resolves the path,
symlinks and '..' included, and refuses one that leaves the run folder. So a
field added later that forgets check_name still cannot write outside.
"""
from __future__ import annotations

import os
import re

from badinput import InputError

MAX_NAME_CHARS = 128
NAME_RULE = (f"a name of 1..{MAX_NAME_CHARS} letters, digits, '_', '.' or '-', "
             "starting with a letter, digit or '_'")


def check_name(value, key: str, file: str | None = None, *, extra: str = "") -> str:
    """value, when it is a safe single path component: no separator, not empty, not '.'/'..',
    no leading '-' (it would read as an option) or '.'; extra: more characters allowed after
    the first (sweep point names use '=', ',', '+', '~')."""
    rest = re.escape("_.-" + extra)
    if not isinstance(value, str) or len(value) > MAX_NAME_CHARS or \
            not re.fullmatch(rf"[A-Za-z0-9_][A-Za-z0-9{rest}]*", value):
        raise InputError(key, NAME_RULE.replace("'.' or '-'", ", ".join(f"'{c}'" for c in "." + extra) + " or '-'"),
                         value, file)
    return value


def inside(root: str, *parts: str) -> str:
    """os.path.join(root, *parts), once it is proven to stay inside root with '..' and
    symlinks resolved; an InputError naming the path otherwise."""
    path = os.path.join(root, *parts)
    base = os.path.realpath(root)
    real = os.path.realpath(path)
    if real != base and os.path.commonpath([base, real]) != base:
        raise InputError("path", f"a path inside the run folder {root}", f"{path} (resolves to {real})")
    return path
