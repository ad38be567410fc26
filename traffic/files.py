"""Reading input files so that every failure is one InputError line naming the file."""
from __future__ import annotations

from badinput import files


def read_json(path, key: str):
    """The parsed JSON of `path` (a regular file, read to a bound); `key` names what the file is for."""
    return files.read_json(path, key)
