"""The `dtnet` command's own surface: --version, help texts, usage errors, a reader that leaves."""
import argparse
import os
import subprocess
import sys

import pytest

from dtnet import cli
from experiment import model

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _run(argv, capsys):
    try:
        code = cli.main(argv)
    except SystemExit as e:  # argparse's own exits (--help, --version, usage errors)
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_version(capsys):
    code, out, _ = _run(["--version"], capsys)
    assert code == 0 and out.startswith("dtnet ") and out.split()[1][0].isdigit(), out


@pytest.mark.parametrize("argv", [["topo"], ["trace"], []])
def test_a_missing_subcommand_names_the_choices_not_an_internal_name(argv, capsys):
    code, _, err = _run(argv, capsys)
    assert code == 2 and "_command" not in err and "required" in err, err
    if argv == ["topo"]:
        assert "{show}" in err


def test_topo_show_full_without_json_is_refused(capsys):
    code, out, err = _run(["topo", "show", "fat-tree:k=4", "--full"], capsys)
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert "--full: expected --json beside it" in err
    code, out, _ = _run(["topo", "show", "fat-tree:k=4", "--full", "--json"], capsys)
    assert code == 0 and '"fabric"' in out


def test_a_reader_that_leaves_gets_no_traceback():
    """`dtnet topo show ... | head -1`: the rest of the output has nowhere to go."""
    p = subprocess.Popen([sys.executable, "-m", "dtnet", "topo", "show", "fat-tree:k=16", "--json", "--full"],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout.readline().strip() == b"{"
    p.stdout.close()  # far more than a pipe buffer is still to come
    err = p.stderr.read().decode()
    assert p.wait(60) == cli.EXIT_PIPE and err == "", err


def test_check_help_describes_its_arguments(capsys):
    code, out, _ = _run(["check", "--help"], capsys)
    flat = " ".join(out.split())
    assert code == 0 and "Needs no root" in flat
    assert "experiment experiment YAML file" in flat and "--set KEY.PATH=VALUE override a value" in flat


def test_trace_show_help_states_its_defaults(capsys):
    _, out, _ = _run(["trace", "show", "--help"], capsys)
    flat = " ".join(out.split())
    for flag, default in (("--link-gbps", "400.0"), ("--latency-us", "5.0"), ("--top", "10")):
        assert f"(default {default})" in flat.split(flag, 2)[2].split("--", 1)[0], (flag, flat)


def _parsers(parser, path=("dtnet",)):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, path + (name,))


def test_every_option_with_a_default_says_it():
    missing = []
    for path, parser in _parsers(cli.build_parser()):
        for a in parser._actions:
            has_default = not any(a.default is d for d in (None, False, argparse.SUPPRESS)) and a.default != []
            if a.option_strings and has_default and "default" not in (a.help or ""):
                missing.append(" ".join(path) + " " + a.option_strings[0])
    assert missing == []


@pytest.mark.parametrize("key,expected", [
    ("jobs.5.name", "--set jobs.5: expected a list index in 0..1 (the list has 2 items), found 5"),
    ("jobs.x.name", "--set jobs.x: expected a list index in 0..1 (the list has 2 items), found x"),
    ("jobs.2", "--set jobs.2: expected a list index in 0..1 (the list has 2 items), found 2"),
    ("jobs.0.hosts.9", "--set jobs.0.hosts.9: expected a list index in 0..1 (the list has 2 items), found 9"),
])
def test_a_set_past_the_end_of_a_list_says_how_long_it_is(key, expected):
    data = {"jobs": [{"name": "a", "hosts": ["h0", "h1"]}, {"name": "b"}]}
    with pytest.raises(model.InputError) as e:
        model.apply_overrides(data, [f"{key}=x"], "e.yaml")
    assert str(e.value) == f"e.yaml: {expected}"
    with pytest.raises(model.InputError, match="none \\(the list is empty\\)"):
        model.apply_overrides({"jobs": []}, ["jobs.0.name=x"], "e.yaml")
