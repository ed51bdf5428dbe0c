"""What security costs (issue #17): produce and consume throughput over each scenario's
listener, with confluent-kafka, against PLAINTEXT in the same run, and TLS consume
against Python's own TLS loopback limit.

    .venv/bin/python -m loadtest.bench_security [--rounds 3] [--mb 32] [--size 1024]
                                                [--workers 1] [--scenarios a,b]

One broker per distinct broker config of the scenarios (`SCENARIOS`: name, extra
broker overrides, client properties for the broker's listeners), on 127.0.0.1 with a
PLAINTEXT, an SSL and a SASL_SSL (PLAIN) listener and certificates made for the run
(tests/security/certs.py). For each round and scenario: one producer writes `--mb` MB
of `--size`-byte records to a fresh 1-partition topic (acks=1, linger.ms=5,
batch.size=1 MiB, no compression), then one consumer reads them back
(loadtest.bench_clients' measurement). Scenarios alternate within each round so that
drift hits all. Printed: every round, the medians, each scenario's ratio to
`plaintext`, and the TLS loopback limit: one TLS 1.3 connection over 127.0.0.1 between
two processes, the server side encrypting 256 KiB writes (what a TLS Fetch does) and
the client decrypting, both with Python's ssl.

More rows (e.g. ACLs enforced or not): append a Scenario to SCENARIOS; its
`broker` overrides start a broker of their own, `client(broker)` gives its client
properties.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import socket
import ssl
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Callable, NamedTuple

from loadtest.bench_clients import consume, produce
from loadtest.peers import MpbrokerPeer, create_topic, delete_topic, free_port, make_workdir
from tests.security.certs import KEY_PASSWORD, Certs

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_bench="bench-secret";')


class SecuredPeer(MpbrokerPeer):
    """An mpbroker with PLAINTEXT (the peer's port), SSL and SASL_SSL listeners."""

    def __init__(self, workdir: Path, certs: Certs, overrides: dict):
        self.ssl_port, self.sasl_ssl_port = free_port(), free_port()
        self.certs = certs
        super().__init__(workdir, {
            "ssl.keystore.type": "PEM", "ssl.keystore.location": certs.server,
            "ssl.key.password": KEY_PASSWORD, "sasl.enabled.mechanisms": "PLAIN",
            "sasl.jaas.config": JAAS, **overrides})
        self.overrides["listeners"] = (f"PLAINTEXT://127.0.0.1:{self.port},"
                                       f"SSL://127.0.0.1:{self.ssl_port},"
                                       f"SASL_SSL://127.0.0.1:{self.sasl_ssl_port}")


class Scenario(NamedTuple):
    name: str
    broker: dict                               # extra broker overrides
    client: Callable[[SecuredPeer], dict]      # confluent-kafka properties


def _plaintext(b):
    return {"bootstrap.servers": b.bootstrap}


def _ssl(b):
    return {"bootstrap.servers": f"127.0.0.1:{b.ssl_port}", "security.protocol": "SSL",
            "ssl.ca.location": b.certs.ca}


def _sasl_ssl(b):
    return {"bootstrap.servers": f"127.0.0.1:{b.sasl_ssl_port}", "security.protocol": "SASL_SSL",
            "ssl.ca.location": b.certs.ca, "sasl.mechanism": "PLAIN",
            "sasl.username": "bench", "sasl.password": "bench-secret"}


SCENARIOS: list[Scenario] = [
    Scenario("plaintext", {}, _plaintext),
    Scenario("ssl", {}, _ssl),
    Scenario("sasl_ssl", {}, _sasl_ssl),
]


def measure(peer: SecuredPeer, scenario: Scenario, size: int, mb: float) -> tuple[float, float]:
    count = max(1000, int(mb * 1e6 / size))
    topic = f"bench-sec-{scenario.name}-{uuid.uuid4().hex[:6]}"
    create_topic(peer.bootstrap, topic)
    props = scenario.client(peer)
    bootstrap = props.pop("bootstrap.servers")
    try:
        p_s = produce(bootstrap, topic, size, count, "1", extra=props)
        c_s = consume(bootstrap, topic, count, extra=props)
    finally:
        delete_topic(peer.bootstrap, topic)
    volume = count * size / 1e6
    return volume / p_s, volume / c_s


# ---------------------------------------------------------------- Python's TLS limit
def _tls_source(certs_dir: str, port_q, seconds: float) -> None:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(Path(certs_dir) / "server.pem"), password=KEY_PASSWORD)
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port_q.put(srv.getsockname()[1])
    conn, _ = srv.accept()
    with ctx.wrap_socket(conn, server_side=True) as s:
        data = b"\x00" * (256 * 1024)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            s.sendall(data)


def tls_loopback_limit_mb_s(certs: Certs, seconds: float = 2.0) -> float:
    """MB/s one TLS connection carries over 127.0.0.1 with Python's ssl on both ends."""
    ctx = mp.get_context("fork")
    port_q = ctx.Queue()
    proc = ctx.Process(target=_tls_source, args=(str(certs.dir), port_q, seconds), daemon=True)
    proc.start()
    try:
        port = port_q.get(timeout=10)
        client = ssl.create_default_context(cafile=certs.ca)
        total = 0
        buf = bytearray(1 << 20)
        with client.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=30),
                                server_hostname="127.0.0.1") as s:
            t0 = time.perf_counter()
            while True:
                n = s.recv_into(buf)
                if not n:
                    break
                total += n
            elapsed = time.perf_counter() - t0
        return total / elapsed / 1e6
    except (ssl.SSLError, ConnectionError):
        return float("nan")
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mb", type=float, default=32.0, help="MB produced per measurement")
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--scenarios", default=",".join(s.name for s in SCENARIOS))
    args = ap.parse_args(argv)
    wanted = args.scenarios.split(",")
    scenarios = [s for s in SCENARIOS if s.name in wanted]
    certs_dir = make_workdir("bench-sec-certs-")
    certs = Certs(certs_dir)
    peers: dict[tuple, SecuredPeer] = {}
    try:
        for s in scenarios:
            key = tuple(sorted(s.broker.items()))
            if key not in peers:
                peers[key] = SecuredPeer(make_workdir("bench-sec-"), certs,
                                         {"num.workers": args.workers, **s.broker}).start()
        limit = tls_loopback_limit_mb_s(certs)
        print(f"# Python TLS loopback limit (1 connection, 2 processes): {limit:,.0f} MB/s")
        print(f"# {args.mb} MB of {args.size}-byte records per measurement, acks=1, "
              f"{args.workers} worker(s)")
        results: dict[str, list] = {s.name: [] for s in scenarios}
        print(f"{'round':>5} {'scenario':>12} {'produce MB/s':>13} {'consume MB/s':>13}")
        for r in range(1, args.rounds + 1):
            for s in scenarios:
                peer = peers[tuple(sorted(s.broker.items()))]
                try:
                    pr, co = measure(peer, s, args.size, args.mb)
                except Exception as e:  # noqa: BLE001 - reported, the run goes on
                    print(f"{r:>5} {s.name:>12} failed: {e}")
                    continue
                results[s.name].append((pr, co))
                print(f"{r:>5} {s.name:>12} {pr:>13,.1f} {co:>13,.1f}", flush=True)
        print("\nmedians (ratio to plaintext; consume also to the TLS loopback limit)")
        base = results.get("plaintext") or []
        bp = statistics.median(p for p, _ in base) if base else float("nan")
        bc = statistics.median(c for _, c in base) if base else float("nan")
        for name, rows in results.items():
            if not rows:
                continue
            mp_, mc = statistics.median(p for p, _ in rows), statistics.median(c for _, c in rows)
            print(f"{name:>12} produce {mp_:>8,.1f} MB/s ({mp_ / bp:.2f}x)  consume {mc:>8,.1f} MB/s "
                  f"({mc / bc:.2f}x; {mc / limit:.2f}x TLS limit)")
    finally:
        for p in peers.values():
            p.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
