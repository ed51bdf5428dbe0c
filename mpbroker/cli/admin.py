"""What every admin command shares: connection options, client config, output, errors.

Options (on every admin subcommand, as Kafka's tools):
  --bootstrap-server HOST:PORT[,...]   (default 127.0.0.1:9092, the broker's default listener)
  --command-config FILE                a client properties file (Java Properties syntax)
                                       with Kafka's client keys; every key, including
                                       security.protocol / sasl.* / ssl.*, goes to the
                                       client library (librdkafka) as-is; its
                                       bootstrap.servers applies when no
                                       --bootstrap-server is given
  --json                               machine-readable output (one JSON document, or
                                       one JSON object per line for the console tools)
  --request-timeout-ms N               how long one admin call may take (default 30000)

Clients: confluent-kafka (AdminClient / Producer / Consumer) for everything it
offers; the project's own protocol client (workers/kafka_client.py) for the three
requests it lacks: DescribeLogDirs, ApiVersions per broker and OffsetDelete. That
client speaks TLS and SASL from the same --command-config properties
(mpbroker/security/client.py); an unusable one exits 2.
confluent-kafka is imported only when a command runs, so the broker does not need it;
so are the project's codecs and client: every `mpbroker` command loads this module, and
none but the command that calls the broker should pay for them at start-up.

Errors: a `CliError` (or a Kafka error from the library) ends the command with one
line on stderr, `mpbroker: <ERROR_NAME>: <message>`, and exit code 1; bad arguments
or an unusable --command-config exit with 2. No tracebacks.
"""
from __future__ import annotations

import asyncio
import json
import logging
import sys
from typing import Any, Callable, Iterable

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


class CliError(Exception):
    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


# ------------------------------------------------------------------ options and config

def add_common(p) -> None:
    p.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, metavar="HOST:PORT",
                   help=f"broker(s) to connect to (default {DEFAULT_BOOTSTRAP})")
    p.add_argument("--command-config", metavar="FILE",
                   help="client properties file (Kafka client keys, passed to the library)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--request-timeout-ms", type=int, default=30000, metavar="MS",
                   help="time limit of one admin request (default 30000)")


class _LastLog(logging.Handler):
    """librdkafka's log lines (it logs every failed connect, many per second) are kept
    from the terminal; the last error-level one is added to a failure's one line."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.last: str | None = None

    def emit(self, record) -> None:
        self.last = record.getMessage()


_CLIENT_LOG = logging.getLogger("mpbroker.cli.client")
_CLIENT_LOG.propagate = False
_LAST = _LastLog()
_CLIENT_LOG.addHandler(_LAST)
_BOOTSTRAP: list[str] = []     # for error messages


def client_config(args, extra: dict | None = None) -> dict:
    """bootstrap.servers, then the --command-config file's keys, then `extra`."""
    from mpbroker.config import parse_properties
    from mpbroker.security.client import librdkafka_properties
    conf = {"bootstrap.servers": args.bootstrap_server, "logger": _CLIENT_LOG}
    if getattr(args, "command_config", None):
        try:
            with open(args.command_config, encoding="utf-8") as f:
                props = parse_properties(f.read())
        except OSError as e:
            raise CliError(f"cannot read --command-config {args.command_config}: "
                           f"{e.strerror or e}", 2)
        conf.update(librdkafka_properties(props))     # Java-client security keys too
        if "bootstrap.servers" in props and args.bootstrap_server == DEFAULT_BOOTSTRAP:
            conf["bootstrap.servers"] = props["bootstrap.servers"]
    if extra:
        conf.update(extra)
    _BOOTSTRAP[:] = [str(conf["bootstrap.servers"])]
    return conf


def kafka_name(err) -> str:
    """Kafka's name of a librdkafka KafkaError (librdkafka shortens some, e.g.
    UNKNOWN_TOPIC_OR_PART); local errors (negative codes, `_TRANSPORT`) keep theirs."""
    code = err.code()
    return error_name(code) if code >= 0 else err.name()


def library_error(e: Exception) -> CliError:
    """A confluent-kafka exception as one line: Kafka's error name and message."""
    err = e.args[0] if getattr(e, "args", None) else None
    if err is not None and hasattr(err, "name") and hasattr(err, "str"):
        if err.name() == "_TRANSPORT":
            return CliError(f"{err.name()}: {err.str()} (bootstrap servers: "
                            f"{_BOOTSTRAP[0] if _BOOTSTRAP else '?'})")
        return CliError(f"{kafka_name(err)}: {err.str()}")
    return CliError(str(e) or type(e).__name__)


def _config_failed(e: Exception) -> CliError:
    ce = library_error(e)
    return CliError(f"bad client configuration: {ce}", 2)


def admin_client(args):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient
    try:
        return AdminClient(client_config(args))
    except (KafkaException, ValueError, TypeError) as e:
        raise _config_failed(e)


def producer(args, extra: dict):
    from confluent_kafka import KafkaException, Producer
    try:
        return Producer(client_config(args, extra))
    except (KafkaException, ValueError, TypeError) as e:
        raise _config_failed(e)


def consumer(args, extra: dict):
    from confluent_kafka import Consumer, KafkaException
    try:
        return Consumer(client_config(args, extra))
    except (KafkaException, ValueError, TypeError) as e:
        raise _config_failed(e)


def timeout_s(args) -> float:
    return max(args.request_timeout_ms, 1) / 1000.0


def result(future, args) -> Any:
    """The value of one admin future, or a CliError with Kafka's error name."""
    import concurrent.futures
    from confluent_kafka import KafkaException
    try:
        return future.result(timeout=timeout_s(args) + 5)
    except KafkaException as e:
        raise library_error(e)
    except concurrent.futures.TimeoutError:
        raise CliError(f"REQUEST_TIMED_OUT: no answer within {args.request_timeout_ms} ms "
                       f"from {args.bootstrap_server}")


def metadata(args, client, topic: str | None = None):
    """ClusterMetadata (brokers, topics, partitions) from a Metadata request."""
    from confluent_kafka import KafkaException
    try:
        return client.list_topics(topic=topic, timeout=timeout_s(args))
    except KafkaException as e:
        raise library_error(e)


# ------------------------------------------------------------------ the project's client

def _security(args):
    """The own client's TLS/SASL from the --command-config properties (security.protocol,
    ssl.ca.location..., sasl.mechanism, sasl.username/password or sasl.jaas.config)."""
    from mpbroker.security.client import ClientSecurity, ClientSecurityError
    try:
        return ClientSecurity.from_properties(client_config(args))
    except ClientSecurityError as e:
        raise CliError(f"bad client configuration: {e}", 2)


def wire_calls(args, what: str, calls: list[tuple[str, int, int, Callable[[int], dict]]]) -> list:
    """Requests with the project's own protocol client, one connection per broker.

    `calls`: (host, port, api_key, body_for(version)); each is sent at the highest
    version both our codec and that broker support. Returns the response dicts in
    order; a broker that cannot be reached raises CliError."""
    from mpbroker.protocol import api_keys, codec

    async def one(host, port, key, body_for):
        async def call(conn):
            versions = await conn.api_versions()
            if key not in versions:
                raise CliError(f"UNSUPPORTED_VERSION: {host}:{port} does not serve "
                               f"{api_keys.NAMES.get(key, key)}")
            lo, hi = codec.REQUESTS[key].valid_versions
            blo, bhi = versions[key]
            version = min(hi, bhi)
            if version < max(lo, blo):
                raise CliError(f"UNSUPPORTED_VERSION: no common version of "
                               f"{api_keys.NAMES.get(key, key)} with {host}:{port}")
            return await conn.request(key, version, body_for(version))
        return await _on_connection(args, host, port, call)

    async def all_calls():
        return await asyncio.gather(*(one(*c) for c in calls))

    return asyncio.run(all_calls())


async def _on_connection(args, host: str, port: int, call):
    """`await call(conn)` on a fresh connection to host:port, closed after; a broker
    that cannot be reached or answered in time raises CliError."""
    from workers.kafka_client import AuthenticationError, KafkaConnection
    timeout_ms = max(args.request_timeout_ms, 1)
    try:
        conn = await asyncio.wait_for(
            KafkaConnection.connect(host, port, client_id="mpbroker-cli",
                                    timeout_ms=timeout_ms, security=_security(args)),
            timeout_ms / 1000)
    except AuthenticationError as e:
        raise CliError(f"authentication failed with {host}:{port}: {e}")
    except (ConnectionError, OSError, asyncio.TimeoutError) as e:
        raise CliError(f"NETWORK_EXCEPTION: cannot connect to {host}:{port}: {e}")
    try:
        return await call(conn)
    except (ConnectionError, asyncio.TimeoutError) as e:
        raise CliError(f"NETWORK_EXCEPTION: {host}:{port}: {e or 'request timed out'}")
    finally:
        await conn.close()


def api_versions(args, host: str, port: int) -> dict[int, tuple[int, int]]:
    return asyncio.run(_on_connection(args, host, port, lambda conn: conn.api_versions()))


def error_name(code: int) -> str:
    from mpbroker.protocol.errors import ErrorCode
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"UNKNOWN_ERROR_{code}"


# ------------------------------------------------------------------ arguments

def topic_partitions(specs: Iterable[str]) -> list[tuple[str, list[int] | None]]:
    """`t`, `t:0,2`, `t:1-3` (kafka-consumer-groups --topic) -> [(topic, parts | None)]."""
    out = []
    for spec in specs:
        topic, sep, parts = spec.partition(":")
        if not topic:
            raise CliError(f"bad --topic {spec!r}", 2)
        if not sep:
            out.append((topic, None))
            continue
        idx: list[int] = []
        for item in parts.split(","):
            lo, dash, hi = item.strip().partition("-")
            try:
                idx.extend(range(int(lo), int(hi) + 1) if dash else [int(lo)])
            except ValueError:
                raise CliError(f"bad partition list in --topic {spec!r}", 2)
        out.append((topic, idx))
    return out


def int_list(value: str, what: str) -> list[int]:
    try:
        return [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        raise CliError(f"bad {what} {value!r}: expected comma-separated integers", 2)


def key_values(items: Iterable[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k.strip():
            raise CliError(f"bad {what} {item!r}: expected key=value", 2)
        out[k.strip()] = v
    return out


# ------------------------------------------------------------------ output

def emit_json(obj) -> None:
    print(json.dumps(obj, indent=2, sort_keys=False, default=str))


def emit(args, obj, lines: Iterable[str]) -> None:
    """A command's answer: `obj` as JSON under --json, else `lines` for people, one a
    line (a generator: only walked when printed)."""
    if args.json:
        emit_json(obj)
    else:
        for line in lines:
            print(line)


def table(headers: list[str], rows: list[list]) -> None:
    """Columns as Kafka's tools print them: left-aligned, padded to the widest cell."""
    cells = [[("-" if c is None else str(c)) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    print(" ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip())
    for r in cells:
        print(" ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


def run(func: Callable, args) -> int:
    """Runs one command: CliError / library errors become one line and an exit code."""
    try:
        rc = func(args)
        sys.stdout.flush()
        return rc or 0
    except CliError as e:
        msg = str(e)
        if _LAST.last and ("_TRANSPORT" in msg or "TIMED_OUT" in msg):
            msg += f" (last client log: {_LAST.last})"
        print(f"mpbroker: {msg}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except ImportError as e:
        print(f"mpbroker: the admin commands need confluent-kafka ({e}): "
              "pip install confluent-kafka", file=sys.stderr)
        return 1
    except Exception as e:
        # the library refuses an argument (ValueError/TypeError) or fails in a way
        # not mapped above: still one line, no traceback
        if type(e).__name__ == "KafkaException":
            print(f"mpbroker: {library_error(e)}", file=sys.stderr)
        else:
            print(f"mpbroker: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
