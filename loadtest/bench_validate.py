"""What record validation (storage/validator.py) costs on the produce path.

    .venv/bin/python -m loadtest.bench_validate [seconds per case, default 6]

For ~16 KiB batches of 100 B and 1 KiB values, uncompressed and lz4/zstd/gzip, it
times (median of ROUNDS rounds, CPU us per batch):

* `validate`: `validator.validate_batch` alone (header, CRC, decompression, the
  record walk), with the compiled fast check (storage/_recwalk.c) when it is built;
* `pure`: the same with the pure-Python walk alone (what MPBROKER_PURE_PYTHON=1 runs);
* `append`: `Partition.append` alone on a real Log in a temporary directory (header,
  CRC, offsets, the copy into the segment): the produce path before validation;
* `produce`: `convert.prepare_produce` (which validates) + `Partition.append`, what
  workers/handlers/produce.py does now;

and prints validation MB/s (uncompressed record bytes per second), validation us per
MB, us per record of `validate` and `pure`, and the ratios validate/append,
produce/append and pure/validate.

    .venv/bin/python -m loadtest.bench_validate --e2e [--rounds 3] [--mb 16]

runs the real broker three times side by side instead (one worker each): with the
defaults ("validated", the compiled check when built), with MPBROKER_PURE_PYTHON=1
("pure") and with `produce.record.validation.enable=false` ("trusted"), and measures
confluent-kafka
produce throughput (loadtest/bench_clients.py: linger.ms=5, batch.size=1 MiB, acks=1,
no compression) for 100 B and 1 KiB records, and the CPU time the broker's processes
used per MB produced (from /proc: robust on a shared box, where throughput is not),
rounds alternating between the brokers; prints every round, the medians and the
ratios to "validated".
"""
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from storage import codecs, convert, validator  # noqa: E402
from storage.batch import HEADER_SIZE, BatchBuilder, RecordBatch  # noqa: E402
from storage.log import Log, LogConfig  # noqa: E402
from workers.partition import Partition  # noqa: E402

ROUNDS = 7
BATCH_BYTES = 16 * 1024
CODECS = (codecs.NONE, codecs.LZ4, codecs.ZSTD, codecs.GZIP)


def make_batch(value_size: int, codec: int) -> tuple[bytes, int]:
    """A client batch of ~BATCH_BYTES of records; (bytes, uncompressed records bytes)."""
    now = int(time.time() * 1000)
    b = BatchBuilder(compression=codec)
    for i in range(max(1, BATCH_BYTES // (value_size + 16))):
        # half random, half repeated: compresses about 2:1, like text payloads
        value = os.urandom(value_size // 4).hex().encode() + bytes(value_size // 2)
        b.append(b"key-%d" % i, value, timestamp=now)
    raw = b.build()
    plain = BatchBuilder()
    for r in RecordBatch(raw).records():
        plain.append(r.key, r.value, timestamp=r.timestamp)
    return raw, len(plain.build()) - HEADER_SIZE


def median_us(fns: dict, seconds: float) -> dict:
    """{name: median us per call}, in CPU time of this process (the dev box is shared:
    wall time counts the other processes' turns); the rounds of the functions are
    interleaved, so that cache and frequency effects hit them alike."""
    rounds = {name: [] for name in fns}
    for fn in fns.values():
        fn()
    for _ in range(ROUNDS):
        for name, fn in fns.items():
            n, start = 0, time.process_time()
            deadline = start + seconds / ROUNDS / len(fns)
            while True:
                for _ in range(10):
                    fn()
                n += 10
                now = time.process_time()
                if now >= deadline:
                    break
            rounds[name].append((now - start) / n * 1e6)
    return {name: statistics.median(r) for name, r in rounds.items()}


def case(value_size: int, codec: int, seconds: float, tmp: str) -> dict:
    payload, plain_bytes = make_batch(value_size, codec)
    cfg = LogConfig()
    cfg.segment_bytes = 64 * 1024 * 1024
    log = Log.open(os.path.join(tmp, "bench-%d-%d" % (value_size, codec)), cfg)
    p = Partition("bench", 0, bytes(16), log)
    rules = validator.rules_for(cfg, 0)

    def validate():
        validator.validate_batch(RecordBatch(memoryview(payload)), rules)

    def pure():
        saved, validator._recwalk = validator._recwalk, None
        try:
            validate()
        finally:
            validator._recwalk = saved

    def append():
        p.append(memoryview(payload))           # readonly, like a request buffer
        if log.size_bytes > 32 * 1024 * 1024:
            log.enforce_retention(0)

    def produce():
        p.append(convert.prepare_produce(memoryview(payload), 9, cfg, log.clock()))
        if log.size_bytes > 32 * 1024 * 1024:
            log.enforce_retention(0)

    out = {"values": value_size, "codec": codecs.NAMES[codec], "batch": len(payload),
           "records": RecordBatch(payload).record_count, "plain": plain_bytes,
           **median_us({"validate": validate, "pure": pure, "append": append,
                        "produce": produce}, seconds)}
    log.close()
    return out


def micro(seconds: float) -> None:
    print("# record walk: %s" % ("compiled fast check (storage/_recwalk.c)" if validator._recwalk
                                 else "pure Python only (not built, or MPBROKER_PURE_PYTHON=1)"))
    print(f"{'values':>6} {'codec':>5} {'batch B':>7} {'recs':>4} {'validate us':>11} "
          f"{'pure us':>8} {'append us':>9} {'produce us':>10} {'valid. MB/s':>11} "
          f"{'us/MB':>7} {'us/rec':>6} {'pure us/rec':>11} {'val/app':>7} {'prod/app':>8} "
          f"{'pure/val':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for value_size in (100, 1024):
            for codec in CODECS:
                r = case(value_size, codec, seconds, tmp)
                mbs = r["plain"] / r["validate"]            # bytes/us = MB/s
                print(f"{r['values']:>6} {r['codec']:>5} {r['batch']:>7} {r['records']:>4} "
                      f"{r['validate']:>11.1f} {r['pure']:>8.1f} {r['append']:>9.1f} "
                      f"{r['produce']:>10.1f} {mbs:>11.0f} {1e6 / mbs:>7.0f} "
                      f"{r['validate'] / r['records']:>6.2f} {r['pure'] / r['records']:>11.2f} "
                      f"{r['validate'] / r['append']:>7.2f} {r['produce'] / r['append']:>8.2f} "
                      f"{r['pure'] / r['validate']:>8.2f}", flush=True)


def group_cpu_s(pgid: int) -> float:
    """CPU seconds (user + system) used so far by the live processes of a process group
    (the broker's supervisor, controller and workers)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue                    # exited meanwhile
        if int(fields[2]) == pgid:
            total += int(fields[11]) + int(fields[12])
    return total / tick


def e2e(rounds: int, mb: float) -> None:
    from loadtest.bench_clients import delete_topic, produce
    from loadtest.peers import MpbrokerPeer, create_topic, make_workdir

    common = {"num.workers": "1"}
    peers = {}
    try:
        for name, extra, env in (("validated", {}, "0"), ("pure", {}, "1"),
                                 ("trusted", {"produce.record.validation.enable": "false"}, "0")):
            os.environ["MPBROKER_PURE_PYTHON"] = env        # the broker inherits it
            peers[name] = MpbrokerPeer(make_workdir(f"bench-validate-{name}-"),
                                       {**common, **extra}).start()
            print(f"# {name}: {peers[name].describe()} MPBROKER_PURE_PYTHON={env}")
        os.environ.pop("MPBROKER_PURE_PYTHON")
        results = {}
        print(f"{'round':>5} {'peer':>9} {'size':>6} {'produce MB/s':>13} {'broker CPU ms/MB':>17}")
        for r in range(1, rounds + 1):
            for size in (100, 1024):
                for name, peer in peers.items():
                    count = max(1000, int(mb * 1e6 / size))
                    topic = f"bench-validate-{size}-{r}"
                    create_topic(peer.bootstrap, topic)
                    try:
                        cpu0 = group_cpu_s(peer.proc.pid)
                        seconds = produce(peer.bootstrap, topic, size, count, "1")
                        cpu = group_cpu_s(peer.proc.pid) - cpu0
                    finally:
                        delete_topic(peer.bootstrap, topic)
                    volume = count * size / 1e6
                    row = (volume / seconds, cpu * 1e3 / volume)
                    results.setdefault((name, size), []).append(row)
                    print(f"{r:>5} {name:>9} {size:>6} {row[0]:>13.1f} {row[1]:>17.1f}",
                          flush=True)
        print("\n# medians: size, peer, MB/s, broker CPU ms/MB, and their ratios to validated")
        for size in (100, 1024):
            v = [statistics.median(x[i] for x in results[("validated", size)]) for i in (0, 1)]
            for name in peers:
                m = [statistics.median(x[i] for x in results[(name, size)]) for i in (0, 1)]
                print(f"{size:>6} {name:>9} {m[0]:>8.1f} {m[1]:>8.1f}   "
                      f"{m[0] / v[0]:>6.2f} {m[1] / v[1]:>6.2f}")
    finally:
        os.environ.pop("MPBROKER_PURE_PYTHON", None)
        for p in peers.values():
            p.stop()


def main():
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("seconds", nargs="?", type=float, default=6.0,
                    help="seconds per micro-benchmark case (default 6)")
    ap.add_argument("--e2e", action="store_true", help="produce through the real broker")
    ap.add_argument("--rounds", type=int, default=3, help="--e2e rounds (default 3)")
    ap.add_argument("--mb", type=float, default=16.0, help="--e2e MB per measurement")
    args = ap.parse_args()
    if args.e2e:
        e2e(args.rounds, args.mb)
    else:
        micro(args.seconds)


if __name__ == "__main__":
    main()
