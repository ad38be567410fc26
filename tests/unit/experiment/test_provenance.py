"""summary.json `source`: a fingerprint of the code an engine's figures rest on."""
import os

from badinput import InputError

from experiment import provenance


def _tree(root, files):
    for rel, data in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)


BASE = {"controller/a.py": b"x = 1\n", "flowsim/b.py": b"y = 2\n", "emulator/c.py": b"z = 3\n",
        "packetsim/driver.cc": b"int main() {}\n", "experiment/d.py": b"w = 4\n"}


def test_the_fingerprint_follows_every_byte_of_the_packages_and_nothing_else(tmp_path):
    _tree(tmp_path, BASE)
    pk = ("controller", "flowsim")
    first = provenance.fingerprint(pk, root=str(tmp_path))
    assert first == provenance.fingerprint(("flowsim", "controller", "flowsim"), root=str(tmp_path))
    _tree(tmp_path, {"controller/__pycache__/a.cpython-311.pyc": b"junk", "flowsim/b.pyc": b"junk",
                     "emulator/c.py": b"z = 4\n"})  # caches, and a package not counted
    assert provenance.fingerprint(pk, root=str(tmp_path)) == first
    _tree(tmp_path, {"flowsim/b.py": b"y = 3\n"})
    assert provenance.fingerprint(pk, root=str(tmp_path)) != first
    # A file moved keeps its bytes but not its path: another fingerprint.
    os.rename(tmp_path / "flowsim" / "b.py", tmp_path / "flowsim" / "b2.py")
    moved = provenance.fingerprint(pk, root=str(tmp_path))
    _tree(tmp_path, {"flowsim/b.py": b"y = 3\n"})
    os.remove(tmp_path / "flowsim" / "b2.py")
    assert moved != provenance.fingerprint(pk, root=str(tmp_path))


def test_each_engine_counts_its_own_packages_and_the_shared_ones(tmp_path):
    _tree(tmp_path, BASE)
    before = {e: provenance.fingerprint(p, root=str(tmp_path)) for e, p in provenance.ENGINE_PACKAGES.items()}
    _tree(tmp_path, {"flowsim/b.py": b"y = 9\n"})  # a change to the flow model
    after = {e: provenance.fingerprint(p, root=str(tmp_path)) for e, p in provenance.ENGINE_PACKAGES.items()}
    assert after["emulate"] == before["emulate"]
    assert after["flow"] != before["flow"] and after["packet"] != before["packet"]
    _tree(tmp_path, {"packetsim/driver.cc": b"int main() { return 1; }\n"})  # not only Python counts
    assert provenance.fingerprint(provenance.ENGINE_PACKAGES["packet"], root=str(tmp_path)) != after["packet"]
    _tree(tmp_path, {"controller/a.py": b"x = 5\n"})  # shared: every engine's changes
    final = {e: provenance.fingerprint(p, root=str(tmp_path)) for e, p in provenance.ENGINE_PACKAGES.items()}
    assert all(final[e] != after[e] for e in final)


def test_a_run_summary_names_its_engines_source(tmp_path):
    from experiment import model
    from flowsim.runner import run_experiment
    exp = model.load(os.path.join(provenance.ROOT, "experiments", "ring-single-switch.yaml"),
                     ["engine=flow", "topology.hosts=4", "jobs.0.workload.iterations=1"])
    s = run_experiment(exp, str(tmp_path / "r"), log=lambda *a: None)
    assert s["source"] == provenance.source("flow")
    assert len(s["source"]["fingerprint"]) == 64 and "flowsim" in s["source"]["packages"]


def test_a_run_from_other_code_is_told_apart_and_set_aside_whole(tmp_path):
    import pytest
    here = provenance.source("emulate")["fingerprint"]
    assert not provenance.made_elsewhere({"source": {"fingerprint": here}}, "emulate")
    assert provenance.made_elsewhere({"source": {"fingerprint": here}}, "flow")
    assert not provenance.made_elsewhere({}, "emulate")  # made before summaries had source: cannot tell
    run = tmp_path / "point"
    _tree(run, {"summary.json": b"{}", "links.csv": b"t_s\n"})
    assert provenance.set_aside(str(run)) == f"{run}.old1" and (tmp_path / "point.old1" / "links.csv").exists()
    os.symlink(tmp_path / "point.old1", run)  # a link is refused, in one line: runs write as root
    with pytest.raises(InputError) as ei:
        provenance.set_aside(str(run))
    assert ei.value.key == "--out" and "symbolic link" in ei.value.found
    assert os.path.isdir(tmp_path / "point.old1") and os.path.islink(run)  # nothing moved
    # A source that is not a fingerprint cannot tell either (a hand-edited or hostile summary).
    for bad in ({"source": "x"}, {"source": {"fingerprint": 7}}, {"source": {"fingerprint": "zz"}}):
        assert provenance.fingerprint_of(bad) is None and not provenance.made_elsewhere(bad, "flow")
