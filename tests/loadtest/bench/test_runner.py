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
