"""loadtest/bench's arithmetic on made-up rounds: medians over A B A B rounds, the ratio
mpbroker / peer, the goals, the client-bound and machine notes, the markdown report.
No broker runs here; tests/loadtest/test_bench.py runs the real thing."""

from __future__ import annotations

import json
import math

import pytest

from loadtest.bench import cli, report, runner

W_MAX = {"name": "1k-max", "fixed_rate": False, "title": "max"}
W_LAT = {"name": "1k-latency", "fixed_rate": True, "title": "fixed"}


def row(broker: str, workload: str, rnd: int, **kw) -> dict:
    base = {"broker": broker, "workload": workload, "round": rnd, "produce_mb_s": 100.0,
            "produce_rec_s": 100_000.0, "consume_live_mb_s": 90.0, "p50_ms": 5.0, "p99_ms": 9.0,
            "p999_ms": 12.0, "broker_cores": 0.5, "client_cores": 0.5, "other_cores": 0.0,
            "machine_busy": 0.5, "producer_core_busy": 0.2, "consumer_core_busy": 0.2,
            "target_rate_rec_s": None, "hit_max_records": False, "produce_errors": 0,
            "consume_errors": 0, "client_errors": [], "first_produce_error": None, "notes": []}
    base.update(kw)
    return base


def run_of(rows: list[dict], loopback: float = 1000.0) -> dict:
    return {"machine": {"cpu_model": "x", "cpus_usable": 2, "cpus": 2, "memory_gib": 1, "os": "linux",
                        "python": "3.11"},
            "limits": {"loopback_tcp_mb_s": loopback, "disk_write_mb_s": 1.0, "disk_write_fsync_mb_s": 1.0},
            "peers": {"mpbroker": "ours", "tansu": "peer"}, "workloads": [W_MAX, W_LAT], "rows": rows,
            "scaling": [], "notes": [], "command": "python -m loadtest.bench",
            "config": {"producers": 2, "consumers": 2, "rounds": 3, "warmup_s": 1, "duration_s": 2,
                       "producer_config": {"acks": "all", "linger.ms": 7}},
            "fixed_rate_rec_s": 500.0, "scaling_workload": "1k-max"}


def alternating_rounds() -> list[dict]:
    # Rounds A B A B A B; one outlier round per broker must not move the medians.
    return [row("mpbroker", "1k-max", 1, produce_mb_s=120, consume_mb_s=600),
            row("tansu", "1k-max", 1, produce_mb_s=100, consume_mb_s=300),
            row("mpbroker", "1k-max", 2, produce_mb_s=10, consume_mb_s=580),
            row("tansu", "1k-max", 2, produce_mb_s=95, consume_mb_s=5000),
            row("mpbroker", "1k-max", 3, produce_mb_s=110, consume_mb_s=620),
            row("tansu", "1k-max", 3, produce_mb_s=105, consume_mb_s=310),
            row("mpbroker", "1k-latency", 1, p99_ms=8.0),
            row("mpbroker", "1k-latency", 2, p99_ms=30.0),
            row("mpbroker", "1k-latency", 3, p99_ms=9.5)]


def test_medians_are_per_workload_and_broker():
    med = report.medians(run_of(alternating_rounds()))
    assert med[("1k-max", "mpbroker")]["produce_mb_s"] == 110
    assert med[("1k-max", "tansu")]["produce_mb_s"] == 100
    assert med[("1k-max", "tansu")]["consume_mb_s"] == 310
    assert med[("1k-latency", "mpbroker")]["p99_ms"] == 9.5
    assert math.isnan(med[("1k-latency", "mpbroker")]["consume_mb_s"])  # no catch-up read there


def test_goals_take_ratios_of_medians():
    goals = {g["goal"]: g for g in report.goals(run_of(alternating_rounds()))}
    produce = goals["produce throughput above tansu's (1k-max)"]
    assert produce["met"] is True and "ratio 1.10" in produce["figure"]
    consume = goals["consume (catch-up) throughput above tansu's (1k-max)"]
    assert consume["met"] is True and "600.0 vs 310.0 MB/s, ratio 1.94" in consume["figure"]
    loopback = goals["consume within 0.5x of the loopback limit (1k-max)"]
    assert loopback["met"] is True and "0.60x" in loopback["figure"]
    latency = goals["p99 end-to-end latency under 10 ms at half the max rate (1k-latency)"]
    assert latency["met"] is True and "9.50 ms at 500 rec/s" in latency["figure"]

    slow = run_of(alternating_rounds(), loopback=5000.0)
    assert {g["goal"]: g for g in report.goals(slow)}[
        "consume within 0.5x of the loopback limit (1k-max)"]["met"] is False


def test_a_goal_without_figures_is_not_judged():
    rows = [r for r in alternating_rounds() if r["broker"] == "mpbroker"]
    goals = {g["goal"]: g for g in report.goals(run_of(rows))}
    assert goals["produce throughput above tansu's (1k-max)"]["met"] is None


def test_notes_name_the_bottleneck():
    quiet = runner._notes(row("mpbroker", "1k-max", 1))
    assert quiet == []
    notes = runner._notes(row("mpbroker", "1k-max", 1, producer_core_busy=0.95, consumer_core_busy=0.97,
                              drainer_core_busy=0.92, machine_busy=0.99, other_cores=0.6,
                              target_rate_rec_s=1000.0, produce_rec_s=500.0))
    text = " | ".join(notes)
    for needle in ("a producer process used 95%", "a live consumer process used 97%",
                   "a catch-up consumer process used 92%", "machine CPU-bound (99%",
                   "background load: 0.60 cores", "fixed rate not reached (500 of 1,000"):
        assert needle in text, (needle, notes)


def test_markdown_report_shows_config_rounds_medians_and_goals():
    md = report.markdown(run_of(alternating_rounds()))
    assert "acks=all, linger.ms=7," in md
    assert md.count("| 1k-max |") >= 6
    assert "| 1k-max | produce MB/s | 110.0 | 100.0 | 1.10 |" in md
    assert "Goals:" in md and "| yes |" in md


def test_scaling_notes_flag_ignored_worker_counts_and_more_workers_than_cores(monkeypatch):
    monkeypatch.setattr(cli.os, "cpu_count", lambda: 2)
    same = [{"num_workers": 1, "broker_processes": 3}, {"num_workers": 2, "broker_processes": 3}]
    assert any("measure the same broker" in n for n in cli.scaling_notes(same))
    grown = [{"num_workers": 1, "broker_processes": 3}, {"num_workers": 4, "broker_processes": 6}]
    notes = cli.scaling_notes(grown)
    assert len(notes) == 1 and "num.workers 4 exceed the 2 CPUs" in notes[0]


def cost_rounds() -> list[dict]:
    # broker CPU per request and per MB (runner: from the clients' request counts); the
    # latency workload has no catch-up read, a broker run elsewhere no CPU figures (None)
    return [row("mpbroker", "1k-max", 1, produce_req_s=300.0, fetch_req_s=100.0, broker_us_per_req=1000.0,
                broker_us_per_mb=2000.0, drain_fetch_req_s=20.0, drain_us_per_fetch=8000.0, drain_us_per_mb=300.0),
            row("tansu", "1k-max", 1, produce_req_s=150.0, fetch_req_s=20.0, broker_us_per_req=4000.0,
                broker_us_per_mb=2500.0, drain_fetch_req_s=60.0, drain_us_per_fetch=9000.0, drain_us_per_mb=1500.0),
            row("mpbroker", "1k-max", 2, produce_req_s=320.0, fetch_req_s=120.0, broker_us_per_req=1200.0,
                broker_us_per_mb=2200.0, drain_fetch_req_s=22.0, drain_us_per_fetch=8200.0, drain_us_per_mb=320.0),
            row("tansu", "1k-max", 2, produce_req_s=140.0, fetch_req_s=22.0, broker_us_per_req=None,
                broker_us_per_mb=None, drain_fetch_req_s=58.0, drain_us_per_fetch=None, drain_us_per_mb=None),
            row("mpbroker", "1k-latency", 1, produce_req_s=700.0, fetch_req_s=140.0, broker_us_per_req=600.0,
                broker_us_per_mb=3000.0)]


def test_cost_medians_and_ratios_per_workload_and_broker():
    med = report.medians(run_of(cost_rounds()))
    assert med[("1k-max", "mpbroker")]["broker_us_per_req"] == 1100.0
    assert med[("1k-max", "tansu")]["broker_us_per_req"] == 4000.0  # the round without figures is left out
    assert med[("1k-max", "tansu")]["drain_fetch_req_s"] == 59.0
    assert math.isnan(med[("1k-latency", "mpbroker")]["drain_us_per_fetch"])
    md = report.markdown(run_of(cost_rounds()))
    assert "Broker CPU per request and per MB." in md
    assert "| workload | broker | round | Produce req/s | Fetch req/s | broker CPU µs / request |" in md
    assert "| 1k-max | mpbroker | 1 | 300 | 100 | 1,000.0 | 2,000 | 20 | 8,000.0 | 300 |" in md
    assert "| 1k-max | tansu | 2 | 140 | 22 | - | - | 58 | - | - |" in md
    assert "| 1k-latency | mpbroker | 1 | 700 | 140 | 600.0 | 3,000 | - | - | - |" in md
    # grouped by workload and broker, rounds in order
    assert md.index("| 1k-max | mpbroker | 2 |") < md.index("| 1k-max | tansu | 1 |")
    assert md.count("| 1k-max | 1 |") == 2  # the main per-round table only
    assert "| 1k-max | broker CPU µs / request | 1,100.0 | 4,000.0 | 0.28 |" in md
    assert "| 1k-max | catch-up broker CPU µs / MB | 310 | 1,500 | 0.21 |" in md
    assert "| 1k-latency | catch-up" not in md  # no catch-up read in the latency workload: no row
    assert "| 1k-latency | broker CPU µs / MB | 3,000 | - | - |" in md


def test_a_round_line_prints_the_cost_figures(capsys):
    r = cost_rounds()[0] | {"consume_mb_s": 500.0, "machine_busy": 0.5}
    cli.print_row(r)
    line = capsys.readouterr().out
    assert "300 Produce/s 100 Fetch/s, broker 1,000.0 µs/req 2,000 µs/MB" in line
    assert "catch-up 20 Fetch/s, 8,000.0 µs/Fetch 300 µs/MB" in line and "broker 0.50 cores" in line
    cli.print_row(cost_rounds()[4] | {"broker_us_per_req": None})
    line = capsys.readouterr().out
    assert "broker - µs/req 3,000 µs/MB" in line and "catch-up" not in line


def test_cost_plot_groups_leave_out_figures_no_broker_has():
    run = run_of(cost_rounds())
    per_req, per_mb = report.cost_groups(run, report.medians(run))
    assert [(w, k) for w, k, _ in per_req] == [("1k-max", "broker_us_per_req"), ("1k-max", "drain_us_per_fetch"),
                                               ("1k-latency", "broker_us_per_req")]
    assert [(w, k) for w, k, _ in per_mb] == [("1k-max", "broker_us_per_mb"), ("1k-max", "drain_us_per_mb"),
                                              ("1k-latency", "broker_us_per_mb")]


def test_write_plots_draws_the_cost_figure(tmp_path):
    pytest.importorskip("matplotlib")
    run = run_of(cost_rounds())
    written = report.write_plots(run, tmp_path)
    assert "cost.png" in written and "throughput.png" in written
    assert (tmp_path / "cost.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"



def scaling_rows() -> list[dict]:
    return [{"num_workers": 1, "broker_processes": 3, "produce_mb_s": 100.0, "consume_mb_s": 200.0},
            {"num_workers": 2, "broker_processes": 4, "produce_mb_s": 190.0, "consume_mb_s": 400.0},
            {"num_workers": 4, "broker_processes": 6, "produce_mb_s": 300.0, "consume_mb_s": 720.0},
            {"num_workers": 16, "broker_processes": 18, "produce_mb_s": 400.0, "consume_mb_s": 800.0}]


def test_scaling_efficiency_is_speedup_per_worker_over_the_smallest_row():
    eff = {e["num_workers"]: e for e in report.scaling_efficiency(scaling_rows())}
    assert eff[1]["produce_efficiency"] == 1.0 and "produce_marginal" not in eff[1]
    assert eff[2]["produce_speedup"] == 1.9 and eff[2]["produce_efficiency"] == 0.95
    assert eff[4]["produce_efficiency"] == 0.75 and eff[4]["produce_marginal"] == 0.55
    assert eff[4]["consume_efficiency"] == 0.9 and eff[4]["consume_marginal"] == 0.8
    assert eff[16]["produce_efficiency"] == 0.25
    # a failed row (no figures) is left out; the base is the smallest worker count that ran
    rows = [{"num_workers": 1, "broker_processes": 0, "notes": ["failed: x"]}] + scaling_rows()[1:]
    eff = report.scaling_efficiency(rows)
    assert [e["num_workers"] for e in eff] == [2, 4, 16] and eff[1]["produce_efficiency"] == 300 / (95 * 4)


def test_cpu_efficiency_compares_cpu_per_mb_produced_and_each_process_is_listed():
    rows = [dict(r, broker_cores=c) for r, c in zip(scaling_rows(), (1.0, 2.0, 4.0, 8.0))]
    rows[2]["broker_process_cores"] = [1.5, 1.0, 0.9, 0.6, 0.0, 0.0]
    eff = {e["num_workers"]: e for e in report.scaling_efficiency(rows)}
    assert eff[1]["cpu_efficiency"] == 1.0
    assert eff[2]["cpu_efficiency"] == (1.0 / 100) / (2.0 / 190)      # 0.95
    assert eff[4]["cpu_efficiency"] == 0.75
    run = run_of(alternating_rounds())
    run["scaling"] = rows
    md = report.markdown(run)
    assert "| 4 | 3.00 | 0.75 | 0.55 | 3.60 | 0.90 | 0.80 | 0.75 |" in md
    assert "1.50 1.00 0.90 0.60 0.00 0.00" in md


def test_scaling_goal_counts_rows_up_to_eight_workers():
    g = report.scaling_goal(scaling_rows())
    assert g["met"] is False and "produce 0.75, consume 0.90" in g["figure"] and "16" not in g["figure"]
    good = [dict(r, produce_mb_s=100.0 * r["num_workers"] * 0.9) for r in scaling_rows()[:3]]
    assert report.scaling_goal(good)["met"] is True
    assert report.scaling_goal(scaling_rows()[:1]) is None


def test_markdown_shows_the_scaling_efficiency_and_its_goal():
    run = run_of(alternating_rounds())
    run["scaling"] = scaling_rows()
    md = report.markdown(run)
    assert "Scaling efficiency over num.workers=1" in md
    assert "| 4 | 3.00 | 0.75 | 0.55 | 3.60 | 0.90 | 0.80 | - |" in md
    assert "per-worker scaling efficiency at least 0.8 up to 8 workers" in md


def test_a_scaling_run_alone_starts_no_peer(monkeypatch, tmp_path):
    # `--workloads ""`: no side-by-side rounds, only the scaling rows
    started = []
    monkeypatch.setattr(cli, "make_peer", lambda *a, **k: started.append(a) or (_ for _ in ()).throw(AssertionError))
    monkeypatch.setattr(cli.machine, "measure_limits", lambda *a: {"loopback_tcp_mb_s": 1.0, "disk_write_mb_s": 1.0,
                                                                   "disk_write_fsync_mb_s": 1.0})
    monkeypatch.setattr(cli, "scaling_run", lambda args, wl, setup, ov: scaling_rows())
    rc = cli.main(["--workloads", "", "--scaling-workers", "1,2,4,16", "--out", str(tmp_path), "--no-plots"])
    assert rc == 0 and started == []
    run = json.loads((tmp_path / "results.json").read_text())
    assert run["rows"] == [] and len(run["scaling"]) == 4
    assert "Scaling efficiency" in (tmp_path / "results.md").read_text()
    with pytest.raises(SystemExit):
        cli.main(["--workloads", "", "--out", str(tmp_path)])


def test_a_scaling_run_alone_plots_the_scaling_only(tmp_path):
    pytest.importorskip("matplotlib")
    run = run_of([])
    run["workloads"], run["peers"], run["scaling"] = [], {}, scaling_rows()
    assert report.write_plots(run, tmp_path) == ["scaling.png"]
    nan = [dict(r, produce_mb_s=float("nan")) if r["num_workers"] == 1 else r for r in scaling_rows()]
    assert report.scaling_efficiency(nan)[0]["num_workers"] == 2     # a NaN row is no base
