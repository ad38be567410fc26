"""The one-line input error shared by the topology layer."""

MAX_FOUND_CHARS = 120  # a whole mapping pasted into the message would drown the key


class InputError(ValueError):
    """Bad user input; str() is one line: 'file: key: expected X, found Y'."""

    def __init__(self, key, expected, found, file=None):
        self.key, self.expected, self.found, self.file = key, expected, found, file
        head = f"{file}: " if file else ""
        shown = repr(found)
        if len(shown) > MAX_FOUND_CHARS:
            shown = shown[:MAX_FOUND_CHARS - 3] + "..."
        super().__init__(f"{head}{key}: expected {expected}, found {shown}")
