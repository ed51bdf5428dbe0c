"""The terminal views of `mpbroker placement` (mpbroker/cli/placement_view.py): the
watch screen rendered from a `show` answer, its redraw loop, the history table."""
import io

from mpbroker.cli.placement_view import render_history, render_watch, watch


def part(topic, p, bytes_in, bytes_out=0.0, requests=0.0):
    return {"topic": topic, "partition": p, "bytes_in_per_s": bytes_in,
            "bytes_out_per_s": bytes_out, "requests_per_s": requests}


def show():
    w0 = [part("t", 0, 900.0, 100.0, 30.0), part("t", 1, 0.0)]
    w1 = [part("t", 2, 100.0, 0.0, 10.0)]
    return {"revision": 7, "num_workers": 2, "interval_s": 1.5, "workers": [
        {"worker": 0, "num_partitions": 2, "bytes_in_per_s": 900.0, "bytes_out_per_s": 100.0,
         "cpu_s_per_s": 0.75, "partitions": w0},
        {"worker": 1, "num_partitions": 1, "bytes_in_per_s": 100.0, "bytes_out_per_s": 0.0,
         "cpu_s_per_s": 0.25, "partitions": w1}]}


def test_watch_screen_shares_imbalance_and_hottest_partitions():
    lines = render_watch(show(), threshold=0.2).splitlines()
    assert lines[0].startswith("placement revision 7, 2 workers, rates over 1.5s; imbalance ")
    assert lines[0].endswith("(threshold 20%: over)")
    w0, w1 = lines[2].split(), lines[3].split()
    # bytes 1000 of 1100, requests 30 of 40, cpu 0.75 of 1.0, as 24-wide bars
    assert w0[:2] == ["0", "2"] and w0[2] == "#" * 22 + "." * 2
    assert w0[3] == "#" * 18 + "." * 6 and w0[4] == "#" * 18 + "." * 6
    assert w1[:2] == ["1", "1"] and w1[2] == "#" * 2 + "." * 22
    assert lines[4].startswith("hottest: t-0 (w0) ") and "t-2 (w1)" in lines[4]
    assert "t-1" not in lines[4]                      # idle partitions are not listed


def test_watch_screen_of_an_idle_broker():
    idle = show()
    for w in idle["workers"]:
        w["bytes_in_per_s"] = w["bytes_out_per_s"] = w["cpu_s_per_s"] = 0.0
        w["partitions"] = [dict(p, bytes_in_per_s=0.0, bytes_out_per_s=0.0, requests_per_s=0.0)
                           for p in w["partitions"]]
    lines = render_watch(idle).splitlines()
    assert "threshold" not in lines[0]
    assert len(lines) == 4                            # no "hottest" line
    assert lines[2].split()[2] == "." * 24


def test_watch_redraws_count_screens():
    out = io.StringIO()
    calls = []

    def call():
        calls.append(1)
        return show()
    assert watch(call, 0.5, count=2, out=out) == 0
    assert len(calls) == 2 and out.getvalue().count("\x1b[H\x1b[2J") == 2
    assert out.getvalue().count("placement revision 7") == 2
    plain = io.StringIO()
    watch(call, None, count=1, out=plain, clear=False)
    assert "\x1b" not in plain.getvalue()


def test_watch_ends_quietly_on_ctrl_c():
    def call():
        raise KeyboardInterrupt
    out = io.StringIO()
    assert watch(call, None, out=out) == 0 and out.getvalue() == ""


def test_history_table():
    assert render_history([]) == "no moves yet"
    lines = render_history([
        {"time_ms": 0, "topic": "orders", "partition": 3, "from": 0, "to": 1, "reason": "auto",
         "imbalance_before": 0.5, "imbalance_after_estimate": 0.1, "unavailable_ms": 12.34},
        {"time_ms": 86_400_000, "topic": "t", "partition": 0, "from": 1, "to": 0,
         "reason": "manual", "unavailable_ms": 1}]).splitlines()
    assert lines[0].split()[:4] == ["time", "(UTC)", "partition", "from"]
    assert lines[1].split() == ["1970-01-01", "00:00:00", "orders-3", "0", "1", "auto",
                                "50%", "->", "10%", "12.3"]
    assert lines[2].split() == ["1970-01-02", "00:00:00", "t-0", "1", "0", "manual", "-", "1.0"]
