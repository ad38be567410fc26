"""Every reader of an input file refuses what is not a regular file (a device is read until
memory runs out, a FIFO waits for a writer forever) with one InputError naming the file."""
import os
import threading

import pytest

from badinput import InputError
from badinput.files import open_regular
from controller import config
from topologies.fabric import Fabric
from traffic.importers import chakra


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "trace.et"
    os.mkfifo(path)
    return str(path)


def _within(seconds, fn, *args):
    """fn(*args)'s result or exception; fails the test if it has not returned within `seconds`."""
    box = {}

    def call():
        try:
            box["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            box["error"] = e

    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{fn.__name__} still reading after {seconds} s"
    return box


@pytest.mark.parametrize("reader", [config.load, Fabric.load, chakra.read_nodes, open_regular.__call__],
                         ids=["controller-config", "fabric-json", "chakra", "open_regular"])
@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_a_file_that_is_not_regular_is_refused_naming_it(reader, kind, fifo, tmp_path):
    path = {"fifo": fifo, "device": "/dev/zero", "directory": str(tmp_path)}[kind]
    args = (path, "trace") if reader == open_regular.__call__ else (path,)
    box = _within(5, reader, *args)
    e = box.get("error")
    assert isinstance(e, InputError), box
    assert str(e).startswith(f"{path}: ") and "expected a regular file" in str(e), str(e)


def test_format_sniffing_does_not_wait_on_a_fifo(fifo):
    assert _within(5, chakra.is_pytorch_et, fifo) == {"value": False}


def test_json_with_an_integer_of_thousands_of_digits_is_an_input_error(tmp_path):
    """Python's JSON reader raises ValueError beyond 4300 digits: one InputError, not a traceback."""
    from badinput.files import read_json
    p = tmp_path / "trace.json"
    p.write_text('{"duration_s": 1' + "0" * 5000 + "}")
    with pytest.raises(InputError) as e:
        read_json(p, "trace")
    assert str(e.value).startswith(f"{p}: trace: expected JSON with numbers that fit 64 bits")
