"""The one error for bad input, below every layer.

Everything a user can get wrong (an experiment file, a --set, a trace, a fabric
spec, an importer's input, a REST announcement, a run folder) raises
InputError, whatever the layer that finds it, so one ``except InputError``
catches them all: the CLI prints the one line and exits 2.
"""
from __future__ import annotations

MAX_FOUND_CHARS = 120  # a whole mapping or op list pasted into the message would drown the key


class InputError(ValueError):
    """``file: key: expected X, found Y`` on one line (the file left out when unknown).

    key names the place (``jobs[0].hosts``, ``line 3``, ``--set``), expected says what would
    be right, found what was there: a string as it was written (quoted when it is empty or
    starts or ends with blanks, so that it shows), anything else as Python writes it.
    """

    def __init__(self, key, expected, found, file=None):
        self.key, self.expected, self.found, self.file = key, expected, found, file
        head = f"{file}: " if file else ""
        plain = isinstance(found, str) and found and found.strip() == found
        shown = found[:MAX_FOUND_CHARS + 1] if plain else short_repr(found, MAX_FOUND_CHARS + 1)
        if len(shown) > MAX_FOUND_CHARS:
            shown = shown[:MAX_FOUND_CHARS - 3] + "..."
        super().__init__(one_line(f"{head}{key}: expected {expected}, found {shown}"))


def short_repr(value, limit: int) -> str:
    """repr(value), built only up to about `limit` characters: a YAML alias bomb or a huge
    integer would take forever (or all memory) to repr whole, just to be cut."""
    parts: list[str] = []
    size = 0

    def add(text):
        nonlocal size
        parts.append(text)
        size += len(text)

    def walk(v):
        if size > limit:
            return
        if isinstance(v, (list, tuple, dict)):
            opening, closing = ("[", "]") if isinstance(v, list) else ("{", "}") if isinstance(v, dict) else ("(", ")")
            add(opening)
            for i, item in enumerate(v.items() if isinstance(v, dict) else v):
                if size > limit:
                    return
                if i:
                    add(", ")
                if isinstance(v, dict):
                    walk(item[0])
                    add(": ")
                    walk(item[1])
                else:
                    walk(item)
            if isinstance(v, tuple) and len(v) == 1:
                add(",")
            add(closing)
        elif isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 4 * limit:
            add(f"an integer of about {int(v.bit_length() * 0.30103)} digits")  # int repr is quadratic
        elif isinstance(v, str) and len(v) > limit:
            add(repr(v[:limit]))
        else:
            add(repr(v))

    walk(value)
    return "".join(parts)


def one_line(text: str) -> str:
    """`text` with line breaks and other control characters escaped: keys and values come from
    the user's file, and an error must stay on one line."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
