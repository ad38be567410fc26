"""The REST API reference (docs/rest-api.yaml) against the live controller: every endpoint's
answers conform, errors included; and the documented by-hand command starts a controller."""
import http.client
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from emulator.testbed.lifecycle import Testbed
from emulator.testbed.process import free_port, stop_process
from tests.integration.helpers import assert_nothing_left
from tests.openapi import errors, load_spec, schema
from topologies import fat_tree

pytestmark = pytest.mark.mininet
SPEC = load_spec()
GOOD = {"version": 1, "job": "j", "collective": "all_reduce", "period_s": 0.1, "compute_s": 0.01,
        "flows": [{"src": "h0", "dst": "h4", "size_bytes": 100000}]}


def call(url, body=None):
    req = urllib.request.Request(url, data=body, method="POST" if body is not None else "GET",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def check_every_endpoint(base):
    api = base + "/dtnet/v1"
    for path, status in (("/status", "200"), ("/state", "200")):
        code, answer = call(api + path)
        assert code == 200 and errors(SPEC, schema(SPEC, "/dtnet/v1" + path, "get", status), answer) == []
    code, answer = call(api + "/announce", json.dumps(GOOD).encode())
    assert code == 200 and errors(SPEC, schema(SPEC, "/dtnet/v1/announce", "post", "200"), answer) == [], answer
    for body, status in ((b"{not json", "400"), (json.dumps({**GOOD, "colour": 1}).encode(), "400")):
        code, answer = call(api + "/announce", body)
        assert str(code) == status and errors(SPEC, schema(SPEC, "/dtnet/v1/announce", "post", status), answer) == []
    code, answer = oversized(api + "/announce")
    assert code == 413 and errors(SPEC, schema(SPEC, "/dtnet/v1/announce", "post", "413"), answer) == []
    return call(api + "/state")[1]


def oversized(url):
    """POST headers declaring a body over the limit, and no body: the controller refuses on the
    Content-Length alone, and a client still writing the refused body would get a broken pipe
    or the answer depending on timing."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    try:
        conn.putrequest("POST", u.path)
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str((1 << 20) + 1))
        conn.endheaders()
        r = conn.getresponse()
        return r.status, json.loads(r.read())
    finally:
        conn.close()


def test_the_live_controller_answers_as_documented(tmp_path):
    with Testbed(fat_tree(4), str(tmp_path), policy="coschedule", scale_link=2.5e-5, log=lambda *_: None) as tb:
        state = check_every_endpoint(tb.rest_url)
        assert state["jobs"] and state["jobs"][0]["job"] == "j"
        # A TCP connection attempt from h0 to h4: placed flows and decisions get documented too.
        probe = "import socket; s = socket.socket(); s.settimeout(2); s.connect_ex(('10.0.0.5', 9))"
        deadline = time.monotonic() + 30
        while not state["decisions"]:
            assert time.monotonic() < deadline, "no flow placed in 30 s"
            tb.host("h0").cmd(f"{sys.executable} -c \"{probe}\"")
            state = check_every_endpoint(tb.rest_url)
        assert state["decisions"][0]["job"] == "j" and tb.ctl_proc.poll() is None
    assert_nothing_left(tmp_path)


def test_the_documented_by_hand_command_starts_a_controller(tmp_path):
    ofp, rest = free_port(), free_port()
    cmd = [sys.executable, "-m", "controller.run", "--fabric", "fat-tree:k=4", "--policy", "congestion-aware",
           "--param", "hold_s=1", "--ofp-port", str(ofp), "--rest-port", str(rest)]
    with open(tmp_path / "controller.log", "w") as log:
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=str(tmp_path), start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                code, st = call(f"http://127.0.0.1:{rest}/dtnet/v1/status")
                break
            except (urllib.error.URLError, ConnectionError):
                assert p.poll() is None, open(tmp_path / "controller.log").read()
                assert time.monotonic() < deadline, "no answer in 60 s"
                time.sleep(0.2)
        assert code == 200 and st["switches_expected"] == 20 and st["routing"] == "congestion-aware"
        state = check_every_endpoint(f"http://127.0.0.1:{rest}")
        assert state["policy"]["params"]["hold_s"] == 1.0
    finally:
        stop_process(p)
    assert p.poll() is not None
