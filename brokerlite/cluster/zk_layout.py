"""The cluster's metadata in ZooKeeper, laid out as Kafka's ZooKeeper-era brokers lay it out.

Paths and JSON documents follow Kafka 3.9's ``ZkData`` so that an operator who
knows Kafka finds the same znodes (``zkCli.sh ls /brokers/ids``), and tools that
read them keep working:

==========================================  =======================================================
``/cluster/id``                             ``{"version":"1","id":"<cluster id>"}``
``/controller``                             ephemeral: ``{"version":1,"brokerid":N,"timestamp":"ms"}``
``/controller_epoch``                       the controller epoch, as decimal text
``/brokers/ids/N``                          ephemeral: the broker's endpoints (version 5)
``/brokers/topics/T``                       the replica assignment and topic id (version 3)
``/brokers/topics/T/partitions/P/state``    leader, leader epoch, ISR, controller epoch
``/config/topics/T``                        the topic's config overrides
``/config/brokers/N``, ``.../<default>``       a broker's (every broker's) dynamic configs
``/config/changes/config_change_N``         an entity's config changed: ``{"version":2,
                                            "entity_path":"brokers/1"}`` (``topics/T``...)
``/admin/delete_topics/T``                  a topic deletion asked for, not done yet
``/admin/preferred_replica_election``       partitions whose leaders to elect again
``/latest_producer_id_block``               the last block of producer ids handed out
``/feature``                                the cluster's finalized feature levels (KIP-584):
                                            ``{"version":2,"status":1,"features":{"transaction.version":
                                            {"max_version_level":2}}}``, a feature at 0 left out
==========================================  =======================================================

Rules:

* Stateless and I/O-free: bytes in, values out, and back. The driver
  (:mod:`.driver`) does the reading and writing through kazoo.
* Decoding never trusts ZooKeeper's bytes: a document that is not what Kafka
  writes raises :class:`ZkDataError` naming the path, never a ``KeyError``.
* Topic ids are written as Kafka writes a ``Uuid``: URL-safe base64 without
  padding (22 characters).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "ADMIN_DELETE_TOPICS",
    "BROKER_IDS",
    "BROKER_TOPICS",
    "CLUSTER_ID",
    "CONFIG_BROKERS",
    "CONFIG_CHANGES",
    "CONFIG_CHANGE_PREFIX",
    "CONFIG_TOPICS",
    "DEFAULT_BROKER",
    "FEATURE",
    "CONTROLLER",
    "CONTROLLER_EPOCH",
    "PERSISTENT_PATHS",
    "PREFERRED_REPLICA_ELECTION",
    "REASSIGN_PARTITIONS",
    "PRODUCER_ID_BLOCK",
    "BrokerRegistration",
    "PartitionState",
    "TopicAssignment",
    "ZkDataError",
    "broker_config_path",
    "broker_path",
    "config_change_notification",
    "decode_broker",
    "decode_cluster_id",
    "decode_controller",
    "decode_controller_epoch",
    "decode_election",
    "decode_features",
    "decode_partition_state",
    "decode_producer_id_block",
    "decode_topic",
    "decode_topic_config",
    "encode_broker",
    "encode_cluster_id",
    "encode_controller",
    "encode_election",
    "encode_features",
    "encode_partition_state",
    "encode_producer_id_block",
    "encode_topic",
    "encode_topic_config",
    "parse_partition_state_path",
    "partition_state_path",
    "topic_config_path",
    "topic_id_text",
    "topic_path",
]

CLUSTER_ID = "/cluster/id"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CONFIG_TOPICS = "/config/topics"
CONFIG_BROKERS = "/config/brokers"
#: The entity name of the cluster-wide default broker (Kafka's ``<default>``).
DEFAULT_BROKER = "<default>"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
ADMIN_DELETE_TOPICS = "/admin/delete_topics"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
FEATURE = "/feature"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
#: Reassignments asked for the way before KIP-455 (Kafka 3.9's controller still acts on them).
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
#: The persistent znodes a Kafka 3.9 broker makes when it joins (``ZkData``'s
#: ``PersistentZkPaths``), made by every broker likewise, so that Kafka's tools
#: and a Kafka broker find the tree they expect.
PERSISTENT_PATHS = (
    "/consumers",
    BROKER_IDS,
    BROKER_TOPICS,
    CONFIG_CHANGES,
    ADMIN_DELETE_TOPICS,
    "/brokers/seqid",
    "/isr_change_notification",
    PRODUCER_ID_BLOCK,
    "/log_dir_event_notification",
    CONFIG_TOPICS,
    "/config/clients",
    "/config/users",
    CONFIG_BROKERS,
    "/config/ips",
)

NO_LEADER = -1


class ZkDataError(ValueError):
    """A znode holds something Kafka's layout does not allow."""


def broker_path(node_id: int) -> str:
    return f"{BROKER_IDS}/{node_id}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}/state"


def parse_partition_state_path(path: str) -> tuple[str, int] | None:
    """The (topic, partition) of a partition state znode's path; None for another path."""
    prefix, _, rest = path.partition(BROKER_TOPICS + "/")
    if prefix or not rest:
        return None
    parts = rest.split("/")
    if len(parts) != 4 or parts[1] != "partitions" or parts[3] != "state":
        return None
    if not (parts[2].isascii() and parts[2].isdigit()):
        return None
    return parts[0], int(parts[2])


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def broker_config_path(entity: str) -> str:
    """A broker's dynamic configs: ``entity`` is its id, or :data:`DEFAULT_BROKER`."""
    return f"{CONFIG_BROKERS}/{entity}"


def config_change_notification(entity_path: str) -> tuple[str, bytes]:
    """The sequential znode announcing that an entity's config changed
    (``entity_path`` as ``topics/T``, ``brokers/1``, ``users/alice``): its path
    prefix (ZooKeeper appends the sequence number) and content."""
    doc = {"version": 2, "entity_path": entity_path}
    # Kafka's field order and compact form (not sorted: "version" comes first).
    return f"{CONFIG_CHANGES}/{CONFIG_CHANGE_PREFIX}", json.dumps(
        doc, separators=(",", ":")
    ).encode()


def _dumps(doc: Mapping[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def _digits(text: str) -> bool:
    """ASCII digits only (``str.isdigit`` also takes superscripts and other scripts)."""
    return bool(text) and text.isascii() and text.isdigit()


def _loads(path: str, data: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ZkDataError(f"{path}: not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ZkDataError(f"{path}: expected a JSON object, got {type(doc).__name__}")
    return doc


def _int(path: str, doc: Mapping[str, Any], key: str) -> int:
    value = doc.get(key)
    if isinstance(value, str) and _digits(value[1:] if value.startswith("-") else value):
        return int(value)  # Kafka writes timestamps and block bounds as strings
    if not isinstance(value, int) or isinstance(value, bool):
        raise ZkDataError(f"{path}: {key!r} must be an integer, got {value!r}")
    return value


def _int_list(path: str, value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise ZkDataError(f"{path}: {what} must be a list of broker ids, got {value!r}")
    return tuple(value)


# -- cluster id and controller -------------------------------------------------------------


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dumps({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    doc = _loads(CLUSTER_ID, data)
    cid = doc.get("id")
    if not isinstance(cid, str) or not cid:
        raise ZkDataError(f"{CLUSTER_ID}: no cluster id in {doc!r}")
    return cid


def encode_controller(node_id: int, timestamp_ms: int) -> bytes:
    """Kafka 3.9's version 2 (a ZooKeeper controller writes ``kraftControllerEpoch`` -1)."""
    doc = {"version": 2, "brokerid": node_id, "timestamp": str(timestamp_ms)}
    return _dumps(doc | {"kraftControllerEpoch": -1})


def decode_controller(data: bytes) -> int:
    """The controller's broker id."""
    return _int(CONTROLLER, _loads(CONTROLLER, data), "brokerid")


def decode_controller_epoch(data: bytes) -> int:
    text = data.decode("ascii", "replace").strip()
    if not _digits(text):
        raise ZkDataError(f"{CONTROLLER_EPOCH}: not a number: {text!r}")
    return int(text)


# -- brokers --------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A live broker as it registered itself under ``/brokers/ids``.

    Attributes:
        node_id: the broker id.
        host, port: where clients reach it (its advertised listener).
        security_protocol: the listener's protocol (``PLAINTEXT``, ``SASL_SSL``...).
        rack: its rack, or None.
    """

    node_id: int
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"
    rack: str | None = None


def encode_broker(broker: BrokerRegistration, timestamp_ms: int) -> bytes:
    protocol = broker.security_protocol
    doc: dict[str, Any] = {
        "version": 5,
        "host": broker.host,
        "port": broker.port,
        "jmx_port": -1,
        "timestamp": str(timestamp_ms),
        "endpoints": [f"{protocol}://{_host_in_url(broker.host)}:{broker.port}"],
        "listener_security_protocol_map": {protocol: protocol},
        "features": {},
    }
    if broker.rack is not None:
        doc["rack"] = broker.rack
    return _dumps(doc)


def _host_in_url(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def decode_broker(node_id: int, data: bytes) -> BrokerRegistration:
    """A broker's registration, read from its first endpoint (Kafka's listener URL)."""
    path = broker_path(node_id)
    doc = _loads(path, data)
    endpoints = doc.get("endpoints")
    if not isinstance(endpoints, list) or not endpoints or not isinstance(endpoints[0], str):
        raise ZkDataError(f"{path}: no endpoints in {doc!r}")
    name, sep, rest = endpoints[0].partition("://")
    host, colon, port_text = rest.rpartition(":")
    if not sep or not colon or not _digits(port_text):
        raise ZkDataError(f"{path}: endpoint {endpoints[0]!r} is not LISTENER://host:port")
    protocols = doc.get("listener_security_protocol_map") or {}
    protocol = protocols.get(name, name) if isinstance(protocols, dict) else name
    rack = doc.get("rack")
    return BrokerRegistration(
        node_id,
        host.strip("[]"),
        int(port_text),
        str(protocol),
        rack if isinstance(rack, str) else None,
    )


# -- topics -----------------------------------------------------------------------------------


def topic_id_text(topic_id: uuid.UUID) -> str:
    """A topic id as Kafka prints and stores it (URL-safe base64, no padding)."""
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode("ascii")


def _topic_id_from(path: str, text: Any) -> uuid.UUID:
    if not isinstance(text, str) or len(text) != 22:
        raise ZkDataError(f"{path}: topic_id {text!r} is not a Kafka Uuid")
    try:
        topic_id = uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))
    except ValueError as exc:
        raise ZkDataError(f"{path}: topic_id {text!r} is not a Kafka Uuid: {exc}") from None
    if not topic_id.int:
        raise ZkDataError(f"{path}: the zero Uuid is not a topic id")
    return topic_id


@dataclasses.dataclass(frozen=True, slots=True)
class TopicAssignment:
    """A topic's replica assignment (``/brokers/topics/T``).

    Attributes:
        name: the topic.
        topic_id: its id, the same on every broker.
        replicas: each partition's replicas, the preferred leader first.
        adding, removing: an ongoing reassignment's replicas being added and
            removed, per partition (KIP-455); empty when none is under way.
    """

    name: str
    topic_id: uuid.UUID
    replicas: Mapping[int, tuple[int, ...]]
    adding: Mapping[int, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    removing: Mapping[int, tuple[int, ...]] = dataclasses.field(default_factory=dict)

    @property
    def num_partitions(self) -> int:
        return len(self.replicas)


def _partition_map(path: str, value: Any, what: str) -> dict[int, tuple[int, ...]]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ZkDataError(f"{path}: {what} must be an object, got {value!r}")
    out: dict[int, tuple[int, ...]] = {}
    for key, replicas in value.items():
        if not isinstance(key, str) or not _digits(key):
            raise ZkDataError(f"{path}: partition {key!r} is not a number")
        out[int(key)] = _int_list(path, replicas, f"{what}[{key}]")
    return out


def encode_topic(topic: TopicAssignment) -> bytes:
    def text_keys(m: Mapping[int, tuple[int, ...]], *, empty: bool) -> dict[str, list[int]]:
        return {str(p): list(r) for p, r in sorted(m.items()) if r or empty}

    # As Kafka's TopicZNode: a partition with no replica being added (removed)
    # is left out of adding_replicas (removing_replicas).
    return _dumps(
        {
            "version": 3,
            "topic_id": topic_id_text(topic.topic_id),
            "partitions": text_keys(topic.replicas, empty=True),
            "adding_replicas": text_keys(topic.adding, empty=False),
            "removing_replicas": text_keys(topic.removing, empty=False),
        }
    )


def decode_topic(name: str, data: bytes) -> TopicAssignment:
    path = topic_path(name)
    doc = _loads(path, data)
    replicas = _partition_map(path, doc.get("partitions"), "partitions")
    if sorted(replicas) != list(range(len(replicas))) or not replicas:
        raise ZkDataError(f"{path}: partitions {sorted(replicas)} are not 0..n-1")
    return TopicAssignment(
        name,
        _topic_id_from(path, doc.get("topic_id")),
        replicas,
        _partition_map(path, doc.get("adding_replicas"), "adding_replicas"),
        _partition_map(path, doc.get("removing_replicas"), "removing_replicas"),
    )


def encode_topic_config(configs: Mapping[str, str]) -> bytes:
    return _dumps({"version": 1, "config": dict(configs)})


def decode_topic_config(name: str, data: bytes) -> dict[str, str]:
    path = topic_config_path(name)
    doc = _loads(path, data)
    config = doc.get("config", {})
    if not isinstance(config, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in config.items()
    ):
        raise ZkDataError(f"{path}: config must map names to strings, got {config!r}")
    return dict(config)


# -- partition state -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionState:
    """A partition's leadership (``.../partitions/P/state``).

    Attributes:
        leader: the leader's broker id, -1 when the partition is offline.
        leader_epoch: bumped by every leader election.
        isr: the in-sync replicas.
        controller_epoch: the epoch of the controller that last elected a leader.
        zk_version: the znode's version when read (the partition epoch); every
            write names the version it replaces, so that two writers never
            overwrite each other unknowingly. -1 for a state not yet written.
    """

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int = -1


def encode_partition_state(state: PartitionState) -> bytes:
    return _dumps(
        {
            "version": 1,
            "leader": state.leader,
            "leader_epoch": state.leader_epoch,
            "isr": list(state.isr),
            "controller_epoch": state.controller_epoch,
        }
    )


def decode_partition_state(
    topic: str, partition: int, data: bytes, zk_version: int
) -> PartitionState:
    path = partition_state_path(topic, partition)
    doc = _loads(path, data)
    return PartitionState(
        _int(path, doc, "leader"),
        _int(path, doc, "leader_epoch"),
        _int_list(path, doc.get("isr"), "isr"),
        _int(path, doc, "controller_epoch"),
        zk_version,
    )


# -- producer ids ------------------------------------------------------------------------------


def encode_producer_id_block(node_id: int, start: int, end: int) -> bytes:
    return _dumps(
        {"version": 1, "broker": node_id, "block_start": str(start), "block_end": str(end)}
    )


def decode_producer_id_block(data: bytes) -> tuple[int, int]:
    """``(block_start, block_end)`` of the last block handed out (both inclusive)."""
    doc = _loads(PRODUCER_ID_BLOCK, data)
    return _int(PRODUCER_ID_BLOCK, doc, "block_start"), _int(PRODUCER_ID_BLOCK, doc, "block_end")


# -- elections asked for ---------------------------------------------------------------------


def encode_election(partitions: list[tuple[str, int]], *, unclean: bool = False) -> bytes:
    """``/admin/preferred_replica_election`` as Kafka writes it; ``unclean`` is
    brokerlite's addition (ElectLeaders' unclean type), absent for preferred."""
    doc: dict[str, Any] = {
        "version": 1,
        "partitions": [{"topic": t, "partition": p} for t, p in partitions],
    }
    if unclean:
        doc["election_type"] = "unclean"
    return _dumps(doc)


def decode_election(data: bytes) -> tuple[list[tuple[str, int]], bool]:
    """The partitions of an election asked for, and whether it is unclean."""
    path = PREFERRED_REPLICA_ELECTION
    doc = _loads(path, data)
    entries = doc.get("partitions")
    if not isinstance(entries, list):
        raise ZkDataError(f"{path}: no partitions list in {doc!r}")
    out: list[tuple[str, int]] = []
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("topic"), str):
            raise ZkDataError(f"{path}: bad entry {entry!r}")
        out.append((entry["topic"], _int(path, entry, "partition")))
    return out, doc.get("election_type") == "unclean"


# -- reassignments asked for in ZooKeeper (before KIP-455) ----------------------------------------


def encode_reassignment(moves: Mapping[tuple[str, int], Sequence[int]]) -> bytes:
    """``/admin/reassign_partitions`` as Kafka's ZooKeeper tools wrote it."""
    entries = [{"topic": t, "partition": p, "replicas": list(r)} for (t, p), r in moves.items()]
    return _dumps({"version": 1, "partitions": entries})


def decode_reassignment(data: bytes) -> dict[tuple[str, int], tuple[int, ...]]:
    """The target replicas of each partition a ``/admin/reassign_partitions`` names."""
    path = REASSIGN_PARTITIONS
    doc = _loads(path, data)
    entries = doc.get("partitions")
    if not isinstance(entries, list):
        raise ZkDataError(f"{path}: no partitions list in {doc!r}")
    out: dict[tuple[str, int], tuple[int, ...]] = {}
    for entry in entries:
        replicas = entry.get("replicas") if isinstance(entry, dict) else None
        if not isinstance(replicas, list) or not isinstance(entry.get("topic"), str):
            raise ZkDataError(f"{path}: bad entry {entry!r}")
        if not all(isinstance(r, int) for r in replicas):
            raise ZkDataError(f"{path}: bad replicas in {entry!r}")
        out[(entry["topic"], _int(path, entry, "partition"))] = tuple(replicas)
    return out


# Kafka 3.9's FeatureZNode: version 2 (no min_version_level), status 1 (enabled).
_FEATURE_ZNODE_VERSION = 2
_FEATURES_ENABLED = 1


def encode_features(levels: Mapping[str, int]) -> bytes:
    """The cluster's finalized levels as ``/feature`` holds them (a level 0 is not
    finalized and left out, as Kafka's controller leaves it out)."""
    features = {name: {"max_version_level": level} for name, level in levels.items() if level > 0}
    doc = {"version": _FEATURE_ZNODE_VERSION, "status": _FEATURES_ENABLED, "features": features}
    return _dumps(doc)


def decode_features(data: bytes) -> dict[str, int]:
    """The finalized levels ``/feature`` holds (version 1 or 2, as Kafka reads it);
    a disabled status finalizes nothing."""
    doc = _loads(FEATURE, data)
    version = _int(FEATURE, doc, "version")
    if version not in (1, _FEATURE_ZNODE_VERSION):
        raise ZkDataError(f"{FEATURE}: unsupported version {version}")
    status = _int(FEATURE, doc, "status")
    features = doc.get("features")
    if not isinstance(features, dict):
        raise ZkDataError(f"{FEATURE}: no features map in {doc!r}")
    out: dict[str, int] = {}
    for name, info in features.items():
        level = info.get("max_version_level") if isinstance(info, dict) else None
        if type(level) is not int or level < 1:
            raise ZkDataError(f"{FEATURE}: feature {name!r} has no max_version_level >= 1")
        out[str(name)] = level
    return out if status == _FEATURES_ENABLED else {}
