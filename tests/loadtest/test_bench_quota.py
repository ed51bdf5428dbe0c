"""loadtest/bench_quota.py: the micro part runs and times both paths (no timing asserted)."""
from loadtest import bench_quota


def test_tiny_micro():
    out = bench_quota.micro(calls=50, repeats=1)
    assert set(out) == {"no quota stored", "produce quota, not violated"}
    assert all(v > 0 for v in out.values())
