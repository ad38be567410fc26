"""The controller's REST API on the real Ryu process: bad requests get a 4xx
and one-line JSON error, and the controller keeps serving."""
import http.client
import json
import urllib.error
import urllib.parse
import urllib.request

import pytest

from controller.cosched import MAX_BODY_BYTES
from emulator.testbed.lifecycle import Testbed
from tests.integration.helpers import assert_nothing_left
from topologies import single_switch

pytestmark = pytest.mark.mininet

BAD_BODIES = {
    "garbage bytes": b"\x00\xff\xfe{{{not json",
    "wrong types": json.dumps({"version": 1, "job": 7, "flows": "h0->h1", "period_s": "soon"}).encode(),
    "unknown host": json.dumps({"version": 1, "job": "j", "period_s": 0.1,
                                "flows": [{"src": "h0", "dst": "h99", "size_bytes": 1}]}).encode(),
}


def post(url, body):
    req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_bad_requests_get_a_4xx_and_the_controller_stays_up(tmp_path):
    with Testbed(single_switch(2), str(tmp_path), scale_link=2.5e-5, routing="coschedule",
                 log=lambda *_: None) as tb:
        url = tb.rest_url + "/dtnet/v1/announce"
        for name, body in BAD_BODIES.items():
            code, answer = post(url, body)
            assert 400 <= code < 500, (name, code, answer[:200])
            if code != 413:
                err = json.loads(answer)["error"]
                assert "\n" not in err and err, (name, err)
            assert tb.controller_status()["ready"], f"controller stopped answering after {name}"
        # Oversized: the controller refuses on Content-Length alone, before the body. Only
        # the headers are sent: a client still writing a body the server has refused gets a
        # broken pipe, depending on timing (seen once in CI).
        u = urllib.parse.urlsplit(url)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
        conn.putrequest("POST", u.path)
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(MAX_BODY_BYTES + 1))
        conn.endheaders()
        r = conn.getresponse()
        assert r.status == 413, (r.status, r.read()[:200])
        conn.close()
        assert tb.controller_status()["ready"], "controller stopped answering after an oversized body"
        good = {"version": 1, "job": "j", "period_s": 0.1, "flows": [{"src": "h0", "dst": "h1", "size_bytes": 1000}]}
        code, answer = post(url, json.dumps(good).encode())
        assert code == 200 and json.loads(answer)["job"] == "j"
        assert tb.ctl_proc.poll() is None
    assert_nothing_left(tmp_path)
