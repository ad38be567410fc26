"""Shared test setup: the integration tier needs root, OVS and Mininet, and says
so once instead of failing in every test."""
import os
import shutil

import pytest


def _integration_missing() -> str | None:
    if os.geteuid() != 0:
        return "integration tests must run as root"
    for tool in ("ovs-vsctl", "mnexec", "tc", "ethtool"):
        if shutil.which(tool) is None:
            return f"{tool} not found: run `make setup`"
    return None


def pytest_configure(config):
    # tests/integration/helpers.py stretches wall-clock bounds by it (the lab VM).
    raw = os.environ.get("DTNET_TEST_TIME_FACTOR", "1")
    try:
        ok = 1 <= float(raw) <= 100
    except ValueError:
        ok = False
    if not ok:
        raise pytest.UsageError(f"DTNET_TEST_TIME_FACTOR: expected a number in 1..100, found '{raw}'")


def pytest_collection_modifyitems(config, items):
    reason = _integration_missing()
    if reason is None:
        return
    # In CI a missing dependency is a failure, not a skip.
    if os.environ.get("CI"):
        raise pytest.UsageError(f"integration tier cannot run: {reason}")
    for item in items:
        if "mininet" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=reason))
