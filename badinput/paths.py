"""Names that become paths, and paths that must stay inside their run folder.

A run writes as root. Whatever a user names that becomes a file or folder name
(an experiment, a job, a sweep point, a captured link) passes check_name; and
every file a run writes is named through inside(), which resolves the path,
symlinks and '..' included, and refuses one that leaves the run folder. So a
field added later that forgets check_name still cannot write outside.
"""
from __future__ import annotations

import contextlib
import errno
import os
import re
import tempfile

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


def _refuse_link(path: str, e: OSError):
    raise InputError("--out", "a run folder whose files are not symbolic links (a run writes as root)",
                     f"{path} is a symbolic link") from e


def open_out(root: str, *parts: str, append: bool = False, binary: bool = False):
    """A file of the run folder opened for writing, created if missing, never through a link:
    the path is proven inside root and O_NOFOLLOW refuses a link planted at its last component."""
    path = inside(root, *parts)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_APPEND if append else os.O_TRUNC)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP:
            _refuse_link(path, e)
        raise
    return os.fdopen(fd, ("a" if append else "w") + ("b" if binary else ""))


def write_atomic(root: str, *parts: str, text: str | bytes) -> str:
    """Whole or not at all: a fresh temporary file (O_EXCL, so no planted name is followed)
    beside the target, renamed over it (a rename replaces a link, never writes through it)."""
    path = inside(root, *parts)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp",
                               dir=os.path.dirname(path) or ".")
    try:
        with os.fdopen(fd, "wb" if isinstance(text, bytes) else "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def links_in(root: str, names) -> list[str]:
    """The paths among root/name (and below folders named) that are symbolic links."""
    found = []
    for name in names:
        path = os.path.join(root, name)
        if os.path.islink(path):
            found.append(path)
        elif os.path.isdir(path):
            for dirpath, dirs, files in os.walk(path):
                found += [os.path.join(dirpath, n) for n in dirs + files
                          if os.path.islink(os.path.join(dirpath, n))]
    return found
