"""loadtest/bench/runner.py's broker CPU reading: the cheap re-read of a process tree and the
drain's CPU interpolated at its last record. No broker runs here."""

from __future__ import annotations

import os

from loadtest.bench import runner


def test_drain_cpu_is_interpolated_at_the_last_record():
    samples = [(1_000, 5.0), (2_000, 5.5), (3_000, 6.5)]
    assert runner._cpu_until(samples, 2_500) == 1.0
    assert runner._cpu_until(samples, 4_000) is None


def test_tree_cpu_reads_the_tree_it_found_again():
    tree = runner.TreeCpu(os.getpid())
    assert tree.procs and tree.procs[0].pid == os.getpid()
    a = tree.seconds()
    sum(i * i for i in range(200_000))
    assert tree.seconds() >= a > 0
    assert runner.TreeCpu(None).seconds() == 0.0


def test_cpu_sample_names_the_busiest_process_of_the_tree():
    # this process spins, a child sleeps: the busiest is this process, the sum covers both
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        first = runner.CpuSample(os.getpid())
        assert child.pid in first.per_pid and os.getpid() in first.per_pid
        t_end = runner.time.monotonic() + 0.3
        while runner.time.monotonic() < t_end:
            pass
        got = runner.CpuSample(os.getpid()).since(first)
        assert got["broker_busiest_process_cores"] > 0.5
        assert got["broker_cores"] >= got["broker_busiest_process_cores"]
        each = got["broker_process_cores"]        # every process of the tree, busiest first
        assert len(each) >= 2 and each == sorted(each, reverse=True)
        assert each[0] == round(got["broker_busiest_process_cores"], 3)
        none = runner.CpuSample(None).since(runner.CpuSample(None))
        assert none["broker_busiest_process_cores"] != none["broker_busiest_process_cores"]   # nan
    finally:
        child.kill()
        child.wait()


def test_a_broker_process_at_a_whole_core_is_noted():
    row = {"producer_core_busy": 0.2, "consumer_core_busy": 0.2, "machine_busy": 0.3, "other_cores": 0.0,
           "target_rate_rec_s": None, "hit_max_records": False, "produce_errors": 0, "consume_errors": 0,
           "client_errors": [], "broker_busiest_process_cores": 0.97}
    assert "broker process-bound: one broker process used 97% of a core" in runner._notes(row)
    assert not any("process-bound" in n for n in runner._notes({**row, "broker_busiest_process_cores": 0.5}))
