"""A worker process's main (workers/main.py): its answers to the controller's questions
and its log-recovery summary. The process itself runs in tests/integration
(test_supervisor.py, test_multiworker.py) and tests/faults/test_process_faults.py."""
from __future__ import annotations

import logging
from types import SimpleNamespace

from workers.main import answer_controller, log_recovery


class FakeRouter:
    def request_counts(self):
        return {("t", 0): 3}


class FakeBroker:
    def __init__(self, router=None):
        self.router = router
        self.partitions, self.followers = {}, {}

    def stats(self):
        return {"requests": 7}


def test_stats_carry_the_routers_request_counts():
    assert answer_controller(FakeBroker(FakeRouter()), "stats") == \
        {"requests": 7, "partition_requests": {("t", 0): 3}}
    assert answer_controller(FakeBroker(), "stats") == {"requests": 7}


def test_a_metrics_snapshot_that_fails_and_an_unknown_question_answer_none():
    assert answer_controller(FakeBroker(), "metrics") is None     # no worker_id: it fails
    assert answer_controller(FakeBroker(), "what") is None


def test_log_recovery_counts_skipped_and_recovered_logs(caplog):
    def part(topic, index, recovered):
        return SimpleNamespace(topic=topic, index=index, log=SimpleNamespace(recovered=recovered))
    broker = FakeBroker()
    broker.partitions = {("a", 0): part("a", 0, False), ("a", 1): part("a", 1, True)}
    broker.followers = {("b", 0): part("b", 0, True)}
    with caplog.at_level(logging.INFO, logger="workers.main"):
        log_recovery(2, broker)
    assert "worker 2: skipped recovery of 1 logs (clean shutdown), recovered 2 logs " \
           "(a-1, b-0)" in caplog.text
