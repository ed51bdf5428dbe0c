"""ZooKeeper paths and znode JSON formats of Kafka's ZK mode (KafkaZkClient / ZkData). No I/O.

Every function here turns values into the exact bytes Kafka writes, or parses those
bytes back; `mpbroker/controller/zk/` does the I/O. Paths are relative to the chroot
of `zookeeper.connect`.

    /cluster/id                              {"version":"1","id":"<22-char base64url>"}
    /controller                   ephemeral  {"version":1,"brokerid":1,"timestamp":"<ms>"}
    /controller_epoch                        "<int>"  (its zkVersion fences controller writes)
    /brokers/ids/<id>             ephemeral  {"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},
                                              "endpoints":["PLAINTEXT://host:port"],"jmx_port":-1,
                                              "features":{},"host":"host","timestamp":"<ms>",
                                              "port":9092,"version":5[,"rack":"r"]}
                                             (the broker epoch is the znode's czxid)
    /brokers/seqid                           empty; each set bumps its version: a generated
                                             broker id is version + reserved.broker.max.id
    /brokers/topics/<t>                      {"version":3,"topic_id":"<base64url>",
                                              "partitions":{"0":[1,2,3]},
                                              "adding_replicas":{},"removing_replicas":{}}
    /brokers/topics/<t>/partitions/<p>/state {"controller_epoch":1,"leader":1,"version":1,
                                              "leader_epoch":0,"isr":[1,2,3]}
                                             (its zkVersion is PartitionState.partition_epoch)
    /config/topics/<t>                       {"version":1,"config":{"k":"v"}}
    /config/brokers/<id>|<default>           {"version":1,"config":{...}}
    /config/changes/config_change_<seq>      {"version":2,"entity_path":"topics/<t>"}
    /config/users/<sanitized user>           {"version":1,"config":{"SCRAM-SHA-256":
                                              "salt=..,stored_key=..,server_key=..,iterations=4096"}}
                                             (plus the user's quota keys; entity_path "users/<u>")
    /admin/delete_topics/<t>                 empty (a deletion request)
    /admin/preferred_replica_election        {"version":1,"partitions":[{"topic":"t","partition":0}]}
    /admin/reassign_partitions               {"version":1,"partitions":[{"topic":"t","partition":0,
                                              "replicas":[1,2]}]}
    /isr_change_notification/isr_change_<seq> {"version":1,"partitions":[{"topic":"t","partition":0}]}
    /latest_producer_id_block                {"version":1,"broker":1,"block_start":"0",
                                              "block_end":"999"}
"""
from __future__ import annotations

import json
import re
import time
import urllib.parse
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from mpbroker.controller import producer_ids
from mpbroker.metadata.model import uuid_from_str, uuid_to_str

CLUSTER_ID = "/cluster/id"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKER_IDS = "/brokers/ids"
BROKER_SEQID = "/brokers/seqid"
TOPICS = "/brokers/topics"
CONFIG_TOPICS = "/config/topics"
CONFIG_CHANGES = "/config/changes"
DELETE_TOPICS = "/admin/delete_topics"
PREFERRED_ELECTION = "/admin/preferred_replica_election"
REASSIGN = "/admin/reassign_partitions"
ISR_CHANGES = "/isr_change_notification"
# mpbroker's: /mpbroker/offline_replicas/<broker id> (ephemeral) lists, in partitions_json
# form, that broker's replicas in failed log dirs (Kafka's controller learns them after a
# /log_dir_event_notification from LeaderAndIsr answers; here the broker says which)
OFFLINE_REPLICAS = "/mpbroker/offline_replicas"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"

# Kafka's KafkaZkClient.createTopLevelPaths
PERSISTENT_PATHS = ("/consumers", "/admin/delete_topics", "/brokers/ids", "/brokers/topics",
                    "/config/changes", "/config/clients", "/config/brokers", "/config/topics",
                    "/config/users", "/isr_change_notification", "/latest_producer_id_block",
                    "/log_dir_event_notification", "/brokers/seqid")



class ZkDataError(ValueError):
    """A znode whose content is not what Kafka writes."""


def _dumps(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _loads(data: bytes, what: str):
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ZkDataError(f"{what}: not JSON: {e}") from None


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def partition_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}"


def state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


# ---- SCRAM users (issue 17)
CONFIG_USERS = "/config/users"


def sanitize(name: str) -> str:
    """Kafka's Sanitizer.sanitize (a user name as a znode name): URL-encoding, UTF-8,
    with only ASCII letters, digits and `._-` left as they are."""
    return urllib.parse.quote(name, safe="").replace("~", "%7E")


def desanitize(name: str) -> str:
    return urllib.parse.unquote(name)


def user_config_path(user: str) -> str:
    return f"{CONFIG_USERS}/{sanitize(user)}"
# ---- end SCRAM users


_STATE_RE = re.compile(r"/brokers/topics/([^/]+)/partitions/(\d+)/state\Z")


def parse_state_path(path: str) -> Optional[Tuple[str, int]]:
    m = _STATE_RE.match(path)
    return (m.group(1), int(m.group(2))) if m else None


# ------------------------------------------------------------------ cluster id / controller

def cluster_id_json(cluster_id: str) -> bytes:
    return _dumps({"version": "1", "id": cluster_id})


def parse_cluster_id(data: bytes) -> str:
    d = _loads(data, CLUSTER_ID)
    if not isinstance(d, dict) or not isinstance(d.get("id"), str):
        raise ZkDataError(f"{CLUSTER_ID}: no id in {data!r}")
    return d["id"]


def controller_json(broker_id: int, now_ms: Optional[int] = None) -> bytes:
    ts = int(time.time() * 1000) if now_ms is None else now_ms
    return _dumps({"version": 1, "brokerid": broker_id, "timestamp": str(ts)})


def parse_controller(data: bytes) -> int:
    """The controller's broker id (Kafka also accepts the pre-0.9 bare integer)."""
    try:
        d = _loads(data, CONTROLLER)
    except ZkDataError:
        raise
    if isinstance(d, int):
        return d
    if isinstance(d, dict) and isinstance(d.get("brokerid"), int):
        return d["brokerid"]
    raise ZkDataError(f"{CONTROLLER}: no brokerid in {data!r}")


# ------------------------------------------------------------------ brokers

@dataclass(frozen=True)
class BrokerInfo:
    id: int
    host: str
    port: int
    rack: Optional[str] = None
    epoch: int = -1          # the czxid of the registration znode
    endpoints: tuple = ()    # ((listener name, host, port), ...) as registered


def broker_json(broker_id: int, host: str, port: int, rack: Optional[str] = None,
                now_ms: Optional[int] = None, endpoints: tuple = ()) -> bytes:
    """Kafka's v5 registration; `endpoints` ((name, host, port, protocol), ...) are every
    advertised listener (default: one PLAINTEXT at host:port). host/port are the
    PLAINTEXT listener's, as Kafka writes them (its inter-broker listener's here when
    there is no PLAINTEXT one, for readers that look only at host/port)."""
    ts = int(time.time() * 1000) if now_ms is None else now_ms
    endpoints = endpoints or (("PLAINTEXT", host, port, "PLAINTEXT"),)
    for name, h, p, _ in endpoints:
        if name == "PLAINTEXT":
            host, port = h, p
    d = {"listener_security_protocol_map": {e[0]: e[3] for e in endpoints},
         "endpoints": [f"{e[0]}://{e[1]}:{e[2]}" for e in endpoints], "jmx_port": -1,
         "features": {}, "host": host, "timestamp": str(ts), "port": port, "version": 5}
    if rack is not None:
        d["rack"] = rack
    return _dumps(d)


def parse_broker(broker_id: int, data: bytes, czxid: int = -1,
                 listener: Optional[str] = None) -> BrokerInfo:
    """Host and port of the `listener` endpoint (the inter-broker one), else PLAINTEXT,
    else the first endpoint, else host/port; and every endpoint."""
    d = _loads(data, broker_path(broker_id))
    if not isinstance(d, dict):
        raise ZkDataError(f"{broker_path(broker_id)}: not an object")
    host, port = d.get("host"), d.get("port")
    endpoints = d.get("endpoints") or []
    chosen, rank, parsed = None, 3, []
    for ep in endpoints:
        if isinstance(ep, str) and "://" in ep:
            name, addr = ep.split("://", 1)
            h, _, p = addr.rpartition(":")
            parsed.append((name, h.strip("[]"), int(p)))
            r = 0 if name == listener else 1 if name == "PLAINTEXT" else 2
            if r < rank:
                chosen, rank = parsed[-1], r
    if chosen is not None:
        host, port = chosen[1], chosen[2]
    if not isinstance(host, str) or not isinstance(port, int) or port < 0:
        raise ZkDataError(f"{broker_path(broker_id)}: no usable endpoint in {data!r}")
    return BrokerInfo(broker_id, host, port, d.get("rack"), czxid, tuple(parsed))


# ------------------------------------------------------------------ topics

@dataclass(frozen=True)
class TopicAssignment:
    topic_id: Optional[bytes]
    partitions: Mapping[int, Tuple[int, ...]]
    adding: Mapping[int, Tuple[int, ...]] = None
    removing: Mapping[int, Tuple[int, ...]] = None


def topic_json(topic_id: bytes, assignment: Mapping[int, Sequence[int]],
               adding: Optional[Mapping[int, Sequence[int]]] = None,
               removing: Optional[Mapping[int, Sequence[int]]] = None) -> bytes:
    def m(a):
        return {str(p): list(r) for p, r in sorted((a or {}).items())}
    return _dumps({"version": 3, "topic_id": uuid_to_str(topic_id), "partitions": m(assignment),
                   "adding_replicas": m(adding), "removing_replicas": m(removing)})


def parse_topic(topic: str, data: bytes) -> TopicAssignment:
    d = _loads(data, topic_path(topic))
    if not isinstance(d, dict) or not isinstance(d.get("partitions"), dict):
        raise ZkDataError(f"{topic_path(topic)}: no partitions in {data!r}")

    def m(a):
        out = {}
        for p, r in (a or {}).items():
            if not isinstance(r, list) or not all(isinstance(b, int) for b in r):
                raise ZkDataError(f"{topic_path(topic)}: bad replica list {r!r}")
            out[int(p)] = tuple(r)
        return out
    tid = d.get("topic_id")
    try:
        topic_id = uuid_from_str(tid) if isinstance(tid, str) else None
    except ValueError:
        raise ZkDataError(f"{topic_path(topic)}: bad topic_id {tid!r}") from None
    return TopicAssignment(topic_id, m(d["partitions"]), m(d.get("adding_replicas")),
                           m(d.get("removing_replicas")))


@dataclass(frozen=True)
class LeaderAndIsr:
    leader: int
    leader_epoch: int
    isr: Tuple[int, ...]
    controller_epoch: int
    zk_version: int = -1

    def __post_init__(self):
        object.__setattr__(self, "isr", tuple(self.isr))


def state_json(s: LeaderAndIsr) -> bytes:
    return _dumps({"controller_epoch": s.controller_epoch, "leader": s.leader, "version": 1,
                   "leader_epoch": s.leader_epoch, "isr": list(s.isr)})


def parse_state(data: bytes, zk_version: int = -1, path: str = "state") -> LeaderAndIsr:
    d = _loads(data, path)
    try:
        isr = d["isr"]
        if not isinstance(isr, list) or not all(isinstance(b, int) for b in isr):
            raise TypeError
        return LeaderAndIsr(int(d["leader"]), int(d["leader_epoch"]), tuple(isr),
                            int(d["controller_epoch"]), zk_version)
    except (KeyError, TypeError, ValueError):
        raise ZkDataError(f"{path}: bad partition state {data!r}") from None


# ------------------------------------------------------------------ configs / admin

def config_json(config: Mapping[str, str]) -> bytes:
    return _dumps({"version": 1, "config": dict(config)})


def parse_config(data: bytes, path: str = "config") -> Dict[str, str]:
    if not data:
        return {}
    d = _loads(data, path)
    cfg = d.get("config") if isinstance(d, dict) else None
    if not isinstance(cfg, dict):
        raise ZkDataError(f"{path}: no config in {data!r}")
    return {str(k): str(v) for k, v in cfg.items()}


def config_change_json(entity_path: str) -> bytes:
    return _dumps({"version": 2, "entity_path": entity_path})


def offline_replicas_path(broker_id: int) -> str:
    return f"{OFFLINE_REPLICAS}/{broker_id}"


def partitions_json(partitions: Sequence[Tuple[str, int]]) -> bytes:
    """/admin/preferred_replica_election, /isr_change_notification/isr_change_* and
    /mpbroker/offline_replicas/<id>."""
    return _dumps({"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in partitions]})


def parse_partitions(data: bytes, path: str = "partitions") -> List[Tuple[str, int]]:
    d = _loads(data, path)
    parts = d.get("partitions") if isinstance(d, dict) else None
    if not isinstance(parts, list):
        raise ZkDataError(f"{path}: no partitions in {data!r}")
    try:
        return [(str(x["topic"]), int(x["partition"])) for x in parts]
    except (KeyError, TypeError, ValueError):
        raise ZkDataError(f"{path}: bad partition entry in {data!r}") from None


def reassignment_json(moves: Mapping[Tuple[str, int], Sequence[int]]) -> bytes:
    return _dumps({"version": 1, "partitions": [{"topic": t, "partition": p, "replicas": list(r)}
                                                for (t, p), r in sorted(moves.items())]})


def parse_reassignment(data: bytes) -> Dict[Tuple[str, int], Tuple[int, ...]]:
    d = _loads(data, REASSIGN)
    parts = d.get("partitions") if isinstance(d, dict) else None
    if not isinstance(parts, list):
        raise ZkDataError(f"{REASSIGN}: no partitions in {data!r}")
    try:
        return {(str(x["topic"]), int(x["partition"])): tuple(int(b) for b in x["replicas"])
                for x in parts}
    except (KeyError, TypeError, ValueError):
        raise ZkDataError(f"{REASSIGN}: bad entry in {data!r}") from None


def producer_id_block_json(broker_id: int, start: int, size: int = producer_ids.BLOCK_SIZE) -> bytes:
    return _dumps({"version": 1, "broker": broker_id, "block_start": str(start),
                   "block_end": str(start + size - 1)})


def next_producer_id_block_start(data: bytes) -> int:
    """The first id of the block after the one stored (0 when the znode is empty)."""
    if not data:
        return 0
    d = _loads(data, PRODUCER_ID_BLOCK)
    try:
        end = int(d["block_end"])
    except (KeyError, TypeError, ValueError):
        raise ZkDataError(f"{PRODUCER_ID_BLOCK}: no block_end in {data!r}") from None
    if end >= 2 ** 63 - 1 - producer_ids.BLOCK_SIZE:
        raise ZkDataError("Have exhausted all producerIds.")
    return end + 1


def split_connect(connect: str) -> Tuple[str, str]:
    """'h1:2181,h2:2181/chroot/x' -> ('h1:2181,h2:2181', '/chroot/x') ('' without chroot)."""
    i = connect.find("/")
    if i < 0:
        return connect, ""
    hosts, chroot = connect[:i], connect[i:].rstrip("/")
    if chroot and not re.match(r"(/[^/\s]+)+\Z", chroot):
        raise ValueError(f"invalid chroot path in zookeeper.connect: {connect!r}")
    return hosts, chroot
