"""A point's run folder as bytes and back: how a worker's result reaches the submitting machine
with no shared file system.

pack() makes a gzip'd tar in memory of regular files and folders only. unpack() trusts nothing
in it: every member is checked before the first byte is written (a relative name that stays
inside the point folder once '..' and symlinks are resolved; a regular file or a folder; no
links, devices or fifos), and files are written with plain modes (no set-uid bits).
"""
from __future__ import annotations

import io
import os
import posixpath
import tarfile

from badinput import InputError
from badinput.paths import inside

COMPRESSLEVEL = 1  # folders hold text (events, traces, csv): level 1 gets most of gzip's gain, fast


def pack(folder: str) -> bytes:
    """folder's files and subfolders as a tar.gz (names relative to folder)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=COMPRESSLEVEL) as tar:
        for root, dirs, files in os.walk(folder):
            dirs.sort()
            rel = os.path.relpath(root, folder)
            for name in sorted(dirs) + sorted(files):
                path = os.path.join(root, name)
                if os.path.islink(path) or not (os.path.isfile(path) or os.path.isdir(path)):
                    continue  # a run writes none; never follow one off the worker's disk
                arc = name if rel == "." else posixpath.join(rel.replace(os.sep, "/"), name)
                tar.add(path, arcname=arc, recursive=False)
    return buf.getvalue()


def members(data: bytes, dest: str) -> list[tuple[tarfile.TarInfo, str]]:
    """Each member with the path it would be written to; an InputError naming the first that is
    not a plain file or folder inside dest."""
    out = []
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
            for m in tar.getmembers():
                name = m.name
                parts = name.split("/")
                if not name or "\0" in name or name.startswith("/") or ".." in parts or "\\" in name:
                    raise InputError("point folder member", "a relative name inside the point folder", name, dest)
                if not (m.isfile() or m.isdir()):
                    raise InputError(f"point folder member {name}", "a regular file or a folder",
                                     "a link, device or fifo", dest)
                out.append((m, inside(dest, *[p for p in parts if p not in ("", ".")])))
    except (tarfile.TarError, EOFError, OSError) as e:
        raise InputError("point folder", "a tar.gz of the point's run folder", f"{type(e).__name__}: {e}",
                         dest) from None
    return out


def unpack(data: bytes, dest: str) -> int:
    """Write the packed folder into dest (made if missing; files already there and not in the
    tar are kept, as a local run into the same folder keeps them). Returns the bytes written."""
    checked = members(data, dest)  # all of it, before anything is written
    os.makedirs(dest, exist_ok=True)
    written = 0
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
        for m, path in checked:
            if m.isdir():
                os.makedirs(path, exist_ok=True)
                continue
            os.makedirs(os.path.dirname(path), exist_ok=True)
            inside(dest, os.path.relpath(path, dest))  # again, now that the parents exist
            src = tar.extractfile(m)
            tmp = inside(dest, os.path.relpath(path, dest) + ".incoming")
            with open(tmp, "wb") as f:
                while chunk := src.read(1 << 20):
                    f.write(chunk)
                    written += len(chunk)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
            os.utime(path, (m.mtime, m.mtime))
    return written
