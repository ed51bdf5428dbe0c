"""The embedded metadata store and the per-log-dir ``meta.properties``.

Without ``zookeeper.connect`` the controller keeps the cluster metadata in the
first log directory::

    <log.dirs[0]>/__mpbroker_metadata/metadata.json

a JSON document (``mpbroker.metadata.model.to_dict``, ``"version": 1``), written
compact (no indentation: about 100 bytes a partition). Its size is bounded by the
partition caps the controller enforces (``max.broker.partitions``, and at most
9,999 partitions per request), so a broker restarts after any accepted request.
Writes go to ``metadata.json.tmp``, are fsynced, renamed over the file and the
directory is fsynced, so a crash leaves either the old or the new document.
There is exactly one writer, the controller process; workers get metadata
pushed by the controller and never read this file. The directory name starts
with ``__`` and has no ``-<partition>`` suffix, so it can never be mistaken for
a partition directory; the log loader skips it.

``meta.properties`` (Kafka's BrokerMetadataCheckpoint, v0, one per log dir)::

    #
    #<date>
    version=0
    broker.id=<id>
    cluster.id=<22-char base64url uuid>

On startup every log dir's file must agree on broker.id and cluster.id, and
with a configured broker.id; a dir without the file gets one.
"""
from __future__ import annotations

import json
import logging
import os
import time
from typing import Dict, List, Optional, Sequence, Tuple

from mpbroker.config import parse_properties
from mpbroker.metadata.model import ClusterMetadata, from_dict, generate_cluster_id, to_dict
from storage import space_reserve
from storage.checkpoint import atomic_write

__all__ = [
    "METADATA_DIR", "METADATA_FILE", "META_PROPERTIES", "MetadataStore", "MetadataStoreError",
    "InconsistentBrokerIdError", "InconsistentClusterIdError", "read_meta_properties",
    "write_meta_properties", "ensure_meta_properties",
]

METADATA_DIR = "__mpbroker_metadata"
METADATA_FILE = "metadata.json"
META_PROPERTIES = "meta.properties"


class MetadataStoreError(Exception):
    pass


class InconsistentBrokerIdError(MetadataStoreError):
    pass


class InconsistentClusterIdError(MetadataStoreError):
    pass


class MetadataStore:
    """Load/save ``ClusterMetadata`` in ``<log_dir>/__mpbroker_metadata``."""

    def __init__(self, log_dir: str):
        self.dir = os.path.join(log_dir, METADATA_DIR)
        self.path = os.path.join(self.dir, METADATA_FILE)
        self._epoch: Optional[int] = None     # of the document on disk, once known

    def load(self) -> Optional[ClusterMetadata]:
        """The stored metadata, or None when there is none yet."""
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return None
        try:
            md = from_dict(json.loads(raw))
        except (ValueError, KeyError, TypeError) as e:
            raise MetadataStoreError(f"Corrupt metadata store {self.path}: {e}") from e
        self._epoch = md.epoch
        return md

    def save(self, md: ClusterMetadata, *, reserve: bool = True) -> None:
        """Persist ``md`` atomically; an older epoch never replaces a newer one.
        ``reserve=False``: a change that only grows the metadata (new topics or
        partitions) fails on a full disk rather than spend the space reserve, which is
        kept for the writes that free space or restart the broker."""
        os.makedirs(self.dir, exist_ok=True)
        if self._epoch is None:     # the one writer reads the file once, not on every save
            self.load()
        if self._epoch is not None and md.epoch < self._epoch:
            raise MetadataStoreError(f"Refusing to replace metadata epoch {self._epoch} with older epoch {md.epoch}")
        data = json.dumps(to_dict(md), separators=(",", ":"), sort_keys=True).encode("utf-8")
        # a full disk: the space reserve makes room (DeleteTopics must free space)
        if reserve:
            space_reserve.write(self.dir, lambda: atomic_write(self.path, data))
        else:
            atomic_write(self.path, data)
        self._epoch = md.epoch


# ------------------------------------------------------------------ meta.properties

def read_meta_properties(log_dir: str) -> Optional[Dict[str, str]]:
    path = os.path.join(log_dir, META_PROPERTIES)
    try:
        with open(path, "r", encoding="latin-1") as f:
            props = parse_properties(f.read())
    except FileNotFoundError:
        return None
    version = props.get("version")
    if version != "0":
        raise MetadataStoreError(f"Unrecognized version of the server meta.properties file {path}: {version}")
    try:
        int(props["broker.id"])
    except (KeyError, ValueError):
        raise MetadataStoreError(f"Failed to read broker.id from {path}") from None
    return props


def write_meta_properties(log_dir: str, broker_id: int, cluster_id: Optional[str], now_s: Optional[float] = None) -> None:
    lines = ["#", "#" + time.strftime("%a %b %d %H:%M:%S %Z %Y", time.localtime(now_s)), "version=0",
             f"broker.id={broker_id}"]
    if cluster_id is not None:
        lines.append(f"cluster.id={cluster_id}")
    os.makedirs(log_dir, exist_ok=True)
    atomic_write(os.path.join(log_dir, META_PROPERTIES), ("\n".join(lines) + "\n").encode("latin-1"))


def ensure_meta_properties(log_dirs: Sequence[str], configured_broker_id: int, cluster_id: Optional[str],
                           *, reserved_broker_max_id: int = 1000, generation_enabled: bool = True
                           ) -> Tuple[int, str]:
    """Check and complete ``meta.properties`` in every log dir (KafkaServer
    startup). ``cluster_id`` is the id the cluster metadata holds (None: adopt
    the stored one). Returns ``(broker_id, cluster_id)``; generates a broker id
    above ``reserved_broker_max_id`` when none is configured or stored, and a
    cluster id when none exists anywhere."""
    stored: List[Tuple[str, Dict[str, str]]] = []
    online = []
    for d in log_dirs:
        try:
            props = read_meta_properties(d)
        except OSError as e:
            # a failed log dir is offline (Kafka's startup does the same); the broker
            # starts on the others, and stops when none is left
            logging.getLogger(__name__).error("log dir %s is offline: %s", d, e)
            continue
        online.append(d)
        if props is not None:
            stored.append((d, props))
    if not online:
        raise MetadataStoreError(f"no usable log dir among {', '.join(log_dirs)}")
    broker_ids = {int(p["broker.id"]) for _, p in stored}
    if len(broker_ids) > 1:
        raise InconsistentBrokerIdError(
            "Failed to match broker.id across log.dirs. This could happen if multiple brokers shared a log "
            "directory (log.dirs) or partial data was manually copied from another broker. Found: "
            + ", ".join(d + ": " + p["broker.id"] for d, p in stored))
    cluster_ids = {p["cluster.id"] for _, p in stored if p.get("cluster.id")}
    if len(cluster_ids) > 1:
        raise InconsistentClusterIdError(f"Failed to match cluster.id across log.dirs: {sorted(cluster_ids)}")
    stored_broker = next(iter(broker_ids)) if broker_ids else None
    stored_cluster = next(iter(cluster_ids)) if cluster_ids else None

    if configured_broker_id >= 0:
        if stored_broker is not None and stored_broker != configured_broker_id:
            raise InconsistentBrokerIdError(
                f"Configured broker.id {configured_broker_id} doesn't match stored broker.id Some({stored_broker}) "
                "in meta.properties. If you moved your data, make sure your configured broker.id matches. If you "
                "intend to create a new broker, you should remove all data in your data directories (log.dirs).")
        broker_id = configured_broker_id
    elif stored_broker is not None:
        broker_id = stored_broker
    elif generation_enabled:
        broker_id = reserved_broker_max_id + 1
    else:
        raise MetadataStoreError("broker.id must be set when broker.id.generation.enable is false")

    if cluster_id is not None and stored_cluster is not None and cluster_id != stored_cluster:
        raise InconsistentClusterIdError(
            f"The Cluster ID {cluster_id} doesn't match stored clusterId Some({stored_cluster}) in "
            "meta.properties. The broker is trying to join the wrong cluster. Configured zookeeper.connect may be wrong.")
    if cluster_id is None:
        if stored_cluster is None:
            stored_cluster = generate_cluster_id()
        cluster_id = stored_cluster

    for d in online:
        props = read_meta_properties(d)
        if props is None or props.get("cluster.id") != cluster_id or int(props["broker.id"]) != broker_id:
            write_meta_properties(d, broker_id, cluster_id)
    return broker_id, cluster_id
