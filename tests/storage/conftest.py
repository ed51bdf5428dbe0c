"""The storage tests' `clock` fixture: a settable clock (tests/storage/log_harness.py)."""
import pytest

from tests.storage.log_harness import Clock


@pytest.fixture
def clock():
    return Clock()
