"""The one error type traffic/ raises for bad input (a file, a spec key, a CLI value)."""

MAX_FOUND_CHARS = 120  # a whole op list pasted into the message would drown the key


class InputError(ValueError):
    """One-line user-facing error: ``file: key: expected X, found Y`` (file left out when None)."""

    def __init__(self, key, expected, found, file=None):
        self.key = key
        self.expected = expected
        self.found = found
        self.file = file
        head = f"{file}: " if file is not None else ""
        shown = str(found)
        if len(shown) > MAX_FOUND_CHARS:
            shown = shown[:MAX_FOUND_CHARS - 3] + "..."
        super().__init__(f"{head}{key}: expected {expected}, found {shown}")

    def with_file(self, file):
        """The same error, now naming the file it came from (callers that know it add it)."""
        if self.file is not None:
            return self
        return InputError(self.key, self.expected, self.found, file=file)


def one_line(text: str) -> str:
    """`text` with line breaks and other control characters escaped: keys and values come from
    the user's file, and an error must stay on one line."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
