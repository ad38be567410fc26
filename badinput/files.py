"""Reading a user's input file: a regular file, read to a bound, gunzipped to a bound.

Every reader of an input file (experiment, fabric, trace, importer inputs) comes through
here, so that /dev/zero, a FIFO or a gzip bomb is one InputError naming the file, not a
read until memory runs out or a wait forever.
"""
from __future__ import annotations

import json
import os
import stat
import zlib

from badinput import InputError

# The largest input dtnet reads: a trace at its op limit (5 million ops) is well under it.
MAX_INPUT_BYTES = 1 << 30
GZIP_MAGIC = b"\x1f\x8b"

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))


def open_regular(path, key: str):
    """`path` opened for reading in binary, when it is a regular file; InputError(key) naming
    the file when it is not one or cannot be opened (a FIFO is refused, not waited on)."""
    path = os.fspath(path)
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused just below.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise InputError(key, "a readable file", e.strerror, file=path) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):  # before fdopen, which refuses a directory with its own error
        os.close(fd)
        found = next((name for test, name in _KINDS if test(mode)), "not a regular file")
        raise InputError(key, "a regular file", found, file=path)
    return os.fdopen(fd, "rb")


def read_bytes(path, key: str, *, max_bytes: int = MAX_INPUT_BYTES, gunzip: bool = False) -> bytes:
    """The bytes of the regular file `path` (gunzipped when gunzip and it starts as gzip does);
    InputError(key) naming the file when it is not one, cannot be read or is larger than max_bytes."""
    path = os.fspath(path)
    with open_regular(path, key) as f:
        try:
            data = f.read(max_bytes + 1)
        except OSError as e:
            raise InputError(key, "a readable file", e.strerror, file=path) from None
    if len(data) > max_bytes:
        raise InputError(key, f"a file of at most {max_bytes >> 20} MiB", "a larger one", file=path)
    if gunzip and data[:2] == GZIP_MAGIC:
        data = _gunzip(data, key, path, max_bytes)
    return data


def _gunzip(data: bytes, key: str, path: str, max_bytes: int) -> bytes:
    """Every gzip member of data, decompressed to at most max_bytes (a bomb stops there)."""
    out = []
    size = 0
    while data[:2] == GZIP_MAGIC:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            part = d.decompress(data, max_bytes + 1 - size)
        except zlib.error as e:
            raise InputError(key, "a complete gzip stream", f"corrupt data ({e})"[:80], file=path) from None
        size += len(part)
        out.append(part)
        if size > max_bytes:
            raise InputError(key, f"at most {max_bytes >> 20} MiB once decompressed", "a larger stream", file=path)
        if not d.eof:
            raise InputError(key, "a complete gzip stream", "a stream cut short", file=path)
        data = d.unused_data
    return b"".join(out)


def read_text(path, key: str, *, max_bytes: int = MAX_INPUT_BYTES, gunzip: bool = False) -> str:
    """read_bytes as UTF-8 text; bytes that are not say where."""
    data = read_bytes(path, key, max_bytes=max_bytes, gunzip=gunzip)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(key, "a UTF-8 text file", f"byte {data[e.start]:#04x} at offset {e.start}",
                         file=os.fspath(path)) from None


def parse_json(text, key: str, file=None):
    """json.loads as one InputError: invalid JSON, or nesting too deep for the parser."""
    try:
        return json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(key, "JSON", f"invalid JSON ({str(e)[:60]})", file=file) from None
    except ValueError:  # Python reads integers of at most 4300 digits
        raise InputError(key, "JSON with numbers that fit 64 bits", "an integer of thousands of digits",
                         file=file) from None
    except RecursionError:
        raise InputError(key, "JSON", "arrays or objects nested too deep to read", file=file) from None


def read_json(path, key: str, *, max_bytes: int = MAX_INPUT_BYTES, gunzip: bool = False):
    """The parsed JSON of the regular file `path`, plain or (gunzip) gzipped."""
    return parse_json(read_bytes(path, key, max_bytes=max_bytes, gunzip=gunzip), key, file=os.fspath(path))
