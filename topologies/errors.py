"""The one-line input error shared by the topology layer."""


class InputError(ValueError):
    """Bad user input; str() is one line: 'file: key: expected X, found Y'."""

    def __init__(self, key, expected, found, file=None):
        self.key, self.expected, self.found, self.file = key, expected, found, file
        head = f"{file}: " if file else ""
        super().__init__(f"{head}{key}: expected {expected}, found {found!r}")
