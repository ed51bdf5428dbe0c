"""Suite-wide pytest setup (unit and integration tests).

Markers `slow` and `integration` are declared in pyproject.toml; they are registered
here too so that a run with a different rootdir/ini still knows them. Every test's
report is kept on its item (`item.rep_setup`, `item.rep_call`, ...) so that fixtures
can tell in their teardown whether the test failed (the integration harness prints
the broker's log then).
"""

from __future__ import annotations

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long-running test (kept in the suite; deselect with -m 'not slow')")
    config.addinivalue_line("markers", "integration: starts a real broker process")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)
