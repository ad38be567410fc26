"""The bad-input corpus (tests/badinput/expected.yaml) through the real commands.

Every malformed file must get exit status 2 and one line on stderr that names
the file, the key or line, and what was expected; never a traceback. A bad
input never costs what is already at --out. Bad announcements get a 4xx from
the controller, which then still answers a good one.
"""
import json
import os
import signal

import pytest
import yaml

from controller.core import FabricController
from dtnet import cli
from topologies import single_switch

CORPUS = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "badinput"))
with open(os.path.join(CORPUS, "expected.yaml")) as _f:
    MANIFEST = yaml.safe_load(_f)
IMPORTERS = ("chakra", "aicb", "kineto", "pytorch-et")
GOOD_ANNOUNCEMENT = json.dumps({"version": 1, "job": "good", "collective": "all_reduce", "period_s": 0.5,
                                "flows": [{"src": "h0", "dst": "h1", "size_bytes": 1 << 20}]}).encode()


def _entries(*kinds):
    return [e for e in MANIFEST if e.split("/")[0] in kinds]


def _path(rel, entry):
    return os.path.join(CORPUS, rel.replace("{file}", entry))


def _snapshot(folder):
    """Every file below `folder` with its bytes: what a failed command must leave alone."""
    out = {}
    for root, _, files in os.walk(folder):
        for name in files:
            p = os.path.join(root, name)
            with open(p, "rb") as f:
                out[os.path.relpath(p, folder)] = f.read()
    return out


def _dtnet(argv, capsys):
    code = cli.main(argv)
    return code, capsys.readouterr().err


def _assert_input_error(code, err, entry):
    spec = MANIFEST[entry]
    assert code == 2, err
    assert "Traceback" not in err
    assert err.endswith("\n") and len(err.splitlines()) == 1, repr(err)
    line = err.rstrip("\n")
    assert line.startswith("dtnet: "), line
    assert _path(spec.get("names", entry), entry) in line, line
    for part in spec["error"]:
        assert part in line, f"{part!r} not in {line!r}"


def test_corpus_is_complete_and_described():
    # __pycache__: importing the corpus's helper policy module may write one.
    on_disk = {os.path.relpath(os.path.join(root, f), CORPUS)
               for root, _, files in os.walk(CORPUS) if "__pycache__" not in root for f in files} - {"expected.yaml"}
    helpers = {i.replace("{file}", e) for e, spec in MANIFEST.items() for i in spec.get("inputs", ())}
    assert on_disk == set(MANIFEST) | helpers
    assert len(MANIFEST) >= 45
    for entry, spec in MANIFEST.items():
        assert entry.split("/")[0] in ("experiments", "traces", "rest", "fabrics") + IMPORTERS, entry
        assert spec.get("why") and spec.get("error"), entry
        assert not set(spec) - {"why", "error", "names", "inputs", "args", "pad_to"}, entry


@pytest.mark.parametrize("entry", _entries("experiments"))
def test_check_rejects_experiment(entry, capsys):
    _assert_input_error(*_dtnet(["check", _path(entry, entry)], capsys), entry)


@pytest.fixture
def no_testbed(monkeypatch):
    """`dtnet run` in-process, stopped before anything touches the machine: if a bad file were
    accepted, building the testbed fails the test. Signal handlers that cmd_run sets are restored."""
    import emulator.run.runner

    def refuse(*_a, **_k):
        raise AssertionError("a bad experiment got as far as starting the testbed")

    monkeypatch.setattr(emulator.run.runner, "Testbed", refuse)
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


@pytest.mark.parametrize("entry", _entries("experiments"))
def test_run_rejects_experiment_and_keeps_out(entry, tmp_path, capsys, no_testbed):
    out = tmp_path / "results"
    out.mkdir()
    (out / "summary.json").write_text('{"status": "complete"}\n')
    (out / "events.jsonl").write_text('{"kind": "collective"}\n')
    before = _snapshot(out)
    _assert_input_error(*_dtnet(["run", _path(entry, entry), "--out", str(out)], capsys), entry)
    assert _snapshot(out) == before


@pytest.mark.parametrize("entry", _entries("traces"))
def test_trace_show_rejects_trace(entry, capsys):
    _assert_input_error(*_dtnet(["trace", "show", _path(entry, entry)], capsys), entry)


@pytest.mark.parametrize("entry", _entries("fabrics"))
def test_topo_show_rejects_fabric_file(entry, capsys):
    _assert_input_error(*_dtnet(["topo", "show", _path(entry, entry)], capsys), entry)


@pytest.mark.parametrize("entry", _entries(*IMPORTERS))
def test_trace_import_rejects_input_and_keeps_out(entry, tmp_path, capsys):
    spec = MANIFEST[entry]
    out = tmp_path / "trace.json"
    out.write_bytes(b'{"format": "dtnet-trace", "kept": true}\n')
    before = _snapshot(tmp_path)
    inputs = [_path(i, entry) for i in spec.get("inputs", ["{file}"])]
    extra = [_path(a, entry) if "{file}" in a else a for a in spec.get("args", ())]
    argv = ["trace", "import", entry.split("/")[0], *inputs, *extra, "--out", str(out)]
    _assert_input_error(*_dtnet(argv, capsys), entry)
    assert _snapshot(tmp_path) == before


@pytest.fixture(scope="module")
def controller():
    """One controller for every bad request: it must keep answering."""
    return FabricController(single_switch(4), routing="coschedule")


@pytest.mark.parametrize("entry", _entries("rest"))
def test_announce_rejects_request_and_stays_up(entry, controller):
    spec = MANIFEST[entry]
    with open(_path(entry, entry), "rb") as f:
        body = f.read()
    body += b" " * max(0, spec.get("pad_to", 0) - len(body))
    code, answer = controller.announce(body, 10.0)
    assert 400 <= code < 500, answer
    assert "\n" not in answer["error"]
    for part in spec["error"]:
        assert part in answer["error"], f"{part!r} not in {answer['error']!r}"
    code, answer = controller.announce(GOOD_ANNOUNCEMENT, 11.0)
    assert code == 200 and answer["job"] == "good"


GENERATE = ["trace", "generate", "--model", "gpt-small", "--gpus", "8", "--microbatches", "2"]


@pytest.mark.parametrize("flags,expected", [
    (["--tp", "3"], "--tp: expected tp x pp dividing the 8 GPUs"),
    (["--tp", "2", "--pp", "2", "--dp", "3"], "--dp: expected tp x pp x dp = 8 GPUs"),
    (["--gpus-per-server", "0"], "--gpus-per-server: expected an integer >= 1"),
])
def test_generate_with_bad_flags_keeps_out(flags, expected, tmp_path, capsys):
    out = tmp_path / "t.json"
    out.write_text("an earlier trace\n")
    code, err = _dtnet(GENERATE + flags + ["--out", str(out)], capsys)
    assert code == 2 and len(err.splitlines()) == 1 and expected in err, err
    assert out.read_text() == "an earlier trace\n" and os.listdir(tmp_path) == ["t.json"]


def test_a_write_that_fails_keeps_out(tmp_path, capsys, monkeypatch):
    """The trace is written beside --out and renamed over it: a failure part-way leaves the old file."""
    out = tmp_path / "t.json"
    out.write_text("an earlier trace\n")

    def fail(*_a):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    code, err = _dtnet(GENERATE + ["--out", str(out)], capsys)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"{out}: --out: expected a trace file path that can be written, found No space left on device" in err
    assert out.read_text() == "an earlier trace\n" and os.listdir(tmp_path) == ["t.json"]


def test_out_that_is_a_folder_is_bad_input(tmp_path, capsys):
    code, err = _dtnet(GENERATE + ["--out", str(tmp_path)], capsys)
    assert code == 2 and len(err.splitlines()) == 1 and "--out: expected a trace file path" in err, err
    assert os.listdir(tmp_path) == []
