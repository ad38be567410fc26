"""A YAML loader for users' files: safe, each key once, and bounded in what aliases expand to.

An alias bomb (nine anchors, each a list of nine aliases of the one before) is a few hundred
bytes that expand to 9^9 values; anything that walks it (a check, an error message, a
deepcopy) then never ends. The composer counts every node as often as aliases repeat it and
stops at a bound, before anything is constructed.
"""
from __future__ import annotations

import yaml

from badinput import InputError

MAX_ALIASES = 10_000  # `<<: *base` merges in hand-written files: a few dozen at most
MAX_NODES = 1_000_000
MAX_INT_DIGITS = 40  # 2^64 has 20 digits: anything far longer is refused before int() reads it  # an experiment file, aliases expanded: a sweep list of 10^4 points is ~10^5


class DuplicateKey(yaml.constructor.ConstructorError):
    """A key written twice in one mapping: plain YAML keeps the last one silently."""


class BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys and more than max_nodes nodes once aliases are expanded.
    Its errors are InputError (key "line N") without a file: the caller adds it."""

    max_nodes = MAX_NODES

    def __init__(self, stream):
        super().__init__(stream)
        self._sizes: dict = {}  # id(node) -> its size with aliases expanded
        self._aliases = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.events.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                mark = self.peek_event().start_mark
                raise InputError(f"line {mark.line + 1}", f"at most {MAX_ALIASES} aliases (*name) in a file",
                                 "more")
        node = super().compose_node(parent, index)
        size = self._sizes.get(id(node))
        if size is None:
            if isinstance(node, yaml.SequenceNode):
                size = 1 + sum(self._sizes.get(id(c), 1) for c in node.value)
            elif isinstance(node, yaml.MappingNode):
                size = 1 + sum(self._sizes.get(id(k), 1) + self._sizes.get(id(v), 1) for k, v in node.value)
            else:
                size = 1
            if size > self.max_nodes:
                raise InputError(f"line {node.start_mark.line + 1}",
                                 f"at most {self.max_nodes} values once aliases are expanded",
                                 f"a value of {size} or more")
            self._sizes[id(node)] = size
        return node

    def construct_yaml_int(self, node):
        # Python refuses to read integers of more than 4300 digits (ValueError, not a YAML error).
        digits = sum(c.isdigit() for c in node.value)
        if digits > MAX_INT_DIGITS:
            raise InputError(f"line {node.start_mark.line + 1}", "an integer within 64 bits",
                             f"an integer of {digits} digits")
        return super().construct_yaml_int(node)

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *base` may be overridden on purpose
            key = self.construct_object(key_node, deep=deep)
            try:
                if key in seen:
                    raise DuplicateKey(None, None, key, key_node.start_mark)
                seen.add(key)
            except TypeError:
                pass  # an unhashable key: SafeLoader says so itself
        return super().construct_mapping(node, deep)


BoundedLoader.add_constructor("tag:yaml.org,2002:int", BoundedLoader.construct_yaml_int)
