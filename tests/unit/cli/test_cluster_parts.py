"""The parts of a cluster sweep that need no cluster. A point's folder shipped back from a worker:
the same files out as in, and nothing a tar could smuggle lands outside the point folder
(checked before anything is written). A worker's machine lock. The input files a worker needs."""
from __future__ import annotations

import io
import os
import tarfile

import pytest

from badinput import InputError
from dtnet.cluster import ship


def _tree(root) -> dict:
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            out[os.path.relpath(p, root)] = open(p, "rb").read()
    return out


def _tar(*members) -> bytes:
    """members: (TarInfo, bytes or None)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _file(name, data=b"x"):
    return tarfile.TarInfo(name), data


def test_a_folder_comes_back_byte_for_byte(tmp_path):
    src = tmp_path / "src"
    (src / "plots").mkdir(parents=True)
    (src / "summary.json").write_text('{"status": "complete"}')
    (src / "plots" / "a.png").write_bytes(bytes(range(256)) * 100)
    (src / "empty").mkdir()
    dest = tmp_path / "sweep" / "points" / "p"
    written = ship.unpack(ship.pack(str(src)), str(dest))
    assert _tree(dest) == _tree(src) and written == sum(map(len, _tree(src).values()))
    assert (dest / "empty").is_dir()
    assert os.stat(dest / "summary.json").st_mtime == pytest.approx(os.stat(src / "summary.json").st_mtime, abs=1)


def test_files_already_in_the_point_folder_and_not_shipped_stay(tmp_path):
    src, dest = tmp_path / "src", tmp_path / "dest"
    src.mkdir()
    dest.mkdir()
    (src / "summary.json").write_text("new")
    (dest / "summary.json").write_text("old")
    (dest / "pcap").mkdir()
    (dest / "pcap" / "a.pcap").write_text("kept")
    ship.unpack(ship.pack(str(src)), str(dest))
    assert (dest / "summary.json").read_text() == "new" and (dest / "pcap" / "a.pcap").read_text() == "kept"


def test_symlinks_in_the_workers_folder_are_not_packed(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a").write_text("a")
    os.symlink("/etc/passwd", src / "link")
    with tarfile.open(fileobj=io.BytesIO(ship.pack(str(src)))) as tar:
        assert tar.getnames() == ["a"]


def _link(name, target, kind=tarfile.SYMTYPE):
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, None


def _special(name, kind):
    info = tarfile.TarInfo(name)
    info.type = kind
    return info, None


@pytest.mark.parametrize("bad, what", [
    (_file("../escaped"), "relative name"),
    (_file("sub/../../escaped"), "relative name"),
    (_file("/tmp/escaped"), "relative name"),
    (_link("link", "/etc/passwd"), "regular file or a folder"),
    (_link("hard", "/etc/passwd", tarfile.LNKTYPE), "regular file or a folder"),
    (_special("dev", tarfile.CHRTYPE), "regular file or a folder"),
    (_special("fifo", tarfile.FIFOTYPE), "regular file or a folder"),
])
def test_a_member_that_would_leave_the_folder_or_is_not_a_plain_file_is_refused_before_any_write(tmp_path, bad, what):
    dest = tmp_path / "points" / "p"
    data = _tar(_file("summary.json", b"{}"), bad)  # a good member first: it must not be written either
    with pytest.raises(InputError) as e:
        ship.unpack(data, str(dest))
    assert what in str(e.value) and "\n" not in str(e.value)
    assert not dest.exists() and not (tmp_path / "escaped").exists() and not os.path.exists("/tmp/escaped")


def test_a_symlink_already_in_the_point_folder_cannot_redirect_a_write(tmp_path):
    dest, outside = tmp_path / "p", tmp_path / "outside"
    dest.mkdir()
    outside.mkdir()
    os.symlink(outside, dest / "plots")
    with pytest.raises(InputError, match="inside the run folder"):
        ship.unpack(_tar(_file("plots/a.png")), str(dest))
    assert list(outside.iterdir()) == []


def test_bytes_that_are_not_a_tar_are_one_line_errors(tmp_path):
    with pytest.raises(InputError, match="a tar.gz of the point's run folder"):
        ship.unpack(b"not a tar at all", str(tmp_path / "p"))
    assert not (tmp_path / "p").exists()


def test_a_workers_machine_lock_runs_flow_points_together_and_an_emulator_point_alone():
    import threading

    from dtnet.cluster.task import _MachineLock

    lock, never = _MachineLock(), (lambda: False)
    assert lock.acquire(False, never) and lock.acquire(False, never)  # two flow points at once
    got = threading.Event()
    emu = threading.Thread(target=lambda: lock.acquire(True, never) and got.set())
    emu.start()
    assert not got.wait(0.5)  # the emulator point waits for the flow points to end ...
    asked = []
    # ... and a new flow point waits behind it (no starving it), until a cancel ends its wait
    assert not lock.acquire(False, lambda: asked.append(1) or len(asked) > 2) and len(asked) == 3
    lock.release(False)
    lock.release(False)
    assert got.wait(5)
    emu.join(5)
    assert not lock.acquire(False, lambda: True)  # still held by the emulator point
    lock.release(True)
    assert lock.acquire(False, never)


def test_the_trace_files_a_sweep_reads_are_named_with_their_digest_and_checked_on_a_worker(tmp_path):
    from dtnet.cluster import task
    from dtnet.cluster.client import _inputs
    from experiment import model, sweep

    trace = tmp_path / "t.json"
    trace.write_text('{"ranks": 4}')
    data = {"name": "x", "engine": "flow", "topology": {"kind": "single-switch", "hosts": 4, "link_gbps": 400},
            "jobs": [{"name": "j0", "hosts": "all", "workload": {"trace": "t.json"}}],
            "sweep": {"grid": {"flow.ecmp_seed": [0, 1]}}}
    points = sweep.expand(model.parse(data, str(tmp_path / "s.yaml")))
    inputs = _inputs(points)  # one file for both points, by absolute path
    assert inputs == [(str(trace), task.file_digest(str(trace)))]
    assert task.check_inputs(inputs) == []  # a worker that has it
    trace.write_text('{"ranks": 8}')
    assert task.check_inputs(inputs) == [f"{trace} (other content here)"]
    trace.unlink()
    assert task.check_inputs(inputs) == [f"{trace} (No such file or directory)"]
    # A fabric file (topology.file, absolute once parsed) is an input too.
    import dataclasses

    fabric = tmp_path / "fabric.yaml"
    fabric.write_text("switches: []")
    trace.write_text("{}")
    with_file = [dataclasses.replace(p, exp=dataclasses.replace(p.exp, topology={"file": str(fabric)})) for p in points]
    assert [path for path, _ in _inputs(with_file)] == sorted([str(fabric), str(trace)])
