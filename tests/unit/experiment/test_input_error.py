"""One InputError for every layer's bad input, and how its line reads."""
import pytest

from badinput import MAX_FOUND_CHARS, InputError
from experiment import model
from topologies import from_spec
from traffic.workload import build_workload


@pytest.mark.parametrize("bad", [
    lambda: from_spec("fat-tree:k=3"),                                               # topologies
    lambda: build_workload({"collective": "gossip", "size_bytes": 1}, 4, file="x"),   # traffic
    lambda: model.parse({"name": "x"}, "e.yaml"),                                     # experiment
    lambda: model.apply_overrides({}, ["no-equals-sign"], "e.yaml"),                  # --set
])
def test_one_except_catches_bad_input_from_every_layer(bad):
    with pytest.raises(InputError) as e:
        bad()
    assert "expected" in str(e.value) and "\n" not in str(e.value)


def test_the_line_names_file_key_expected_and_found():
    e = InputError("jobs[0].hosts", "a list of hosts", "h99", file="e.yaml")
    assert str(e) == "e.yaml: jobs[0].hosts: expected a list of hosts, found h99"
    assert (e.file, e.key, e.expected, e.found) == ("e.yaml", "jobs[0].hosts", "a list of hosts", "h99")
    assert str(InputError("k", "x", 5)) == "k: expected x, found 5"


@pytest.mark.parametrize("found, shown", [
    ("", "''"),                     # an empty string shows as one
    (" h1", "' h1'"),               # so do blanks around it
    (None, "None"),
    ([1, "a"], "[1, 'a']"),
    ("two\nlines", "two\\nlines"),  # the message stays on one line
])
def test_found_is_shown_so_that_it_can_be_seen(found, shown):
    assert str(InputError("k", "x", found)).endswith(f"found {shown}")


def test_a_long_found_is_cut():
    text = str(InputError("k", "x", list(range(1000))))
    assert len(text) < MAX_FOUND_CHARS + 40 and text.endswith("...")
