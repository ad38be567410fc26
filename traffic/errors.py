"""The one error type traffic/ raises for bad input (a file, a spec key, a CLI value)."""


class InputError(ValueError):
    """One-line user-facing error: ``file: key: expected X, found Y`` (file left out when None)."""

    def __init__(self, key, expected, found, file=None):
        self.key = key
        self.expected = expected
        self.found = found
        self.file = file
        head = f"{file}: " if file is not None else ""
        super().__init__(f"{head}{key}: expected {expected}, found {found}")

    def with_file(self, file):
        """The same error, now naming the file it came from (callers that know it add it)."""
        if self.file is not None:
            return self
        return InputError(self.key, self.expected, self.found, file=file)
