"""loadtest/bench_clients.py's cost figures and median lines on made-up measurements; no
broker runs here."""

from __future__ import annotations

from loadtest import bench_clients


def test_cost_figures_per_request_and_per_mb_of_each_phase():
    c = bench_clients.cost_figures(16.0, 0.8, 0.2, 400, 50)
    assert c["us_per_produce"] == 2000.0 and c["us_per_mb_produced"] == 50_000.0
    assert c["us_per_fetch"] == 4000.0 and c["us_per_mb_consumed"] == 12_500.0
    unknown = bench_clients.cost_figures(16.0, None, None, None, 0)
    assert all(unknown[k] is None for k in ("us_per_produce", "us_per_mb_produced", "us_per_fetch",
                                            "us_per_mb_consumed"))


def row(pr: float, co: float, us_p: float | None) -> dict:
    return {"produce_mb_s": pr, "consume_mb_s": co, "us_per_produce": us_p}


def test_median_lines_give_medians_per_figure_and_the_ratio():
    results = {("mpbroker", 100, "1"): [row(10, 50, 100.0), row(30, 70, 300.0), row(20, 60, None)],
               ("tansu", 100, "1"): [row(10, 40, 400.0)]}
    lines = bench_clients.median_lines(results, ["mpbroker", "tansu"], [100], ["1"])
    assert lines[0].split() == ["size", "acks", "figure", "mpbroker", "tansu", "ratio"]
    by_title = {ln[12:26].strip(): ln.split()[-3:] for ln in lines[1:]}
    assert by_title["produce MB/s"] == ["20.0", "10.0", "2.00"]
    assert by_title["consume MB/s"] == ["60.0", "40.0", "1.50"]
    assert by_title["µs/Produce"] == ["200.0", "400.0", "0.50"]
    assert by_title["µs/Fetch"] == ["-", "-", "-"]
    assert len(lines) == 1 + len(bench_clients.FIELDS)
    alone = bench_clients.median_lines(results, ["mpbroker"], [100], ["1"])
    assert "ratio" not in alone[0] and alone[1].split()[-1] == "20.0"
