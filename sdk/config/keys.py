"""Settings' names: how a key given in any spelling finds its setting, and what
other clients' settings trafka does not take.

Rules:

* A key is normalised (case, ``.`` and ``-`` as ``_``) and looked up among a
  class's field names, dotted names and aliases (other clients' names that mean
  exactly the same, declared on the fields in :mod:`.config`).
* :data:`_NOT_TAKEN`: librdkafka's, confluent-kafka's and Java's settings that
  trafka cannot honour as their client defines them, each with what to use
  instead; :data:`_NOT_FOR_SHARE_GROUPS`: consumer settings a share consumer
  refuses. :func:`~.config._unknown` reads both before any "did you mean".
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from .values import _dotted

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


def _norm(key: str) -> str:
    return key.strip().lower().replace(".", "_").replace("-", "_")


_NAMES_CACHE: dict[type, dict[str, str]] = {}


def _names(cls: type[DataclassInstance]) -> dict[str, str]:
    """A settings dataclass's names (fields, dotted names, aliases), normalised,
    to its field names."""
    names = _NAMES_CACHE.get(cls)
    if names is None:
        names = {}
        for f in dataclasses.fields(cls):
            names[f.name] = f.name
            names[_norm(_dotted(f))] = f.name
            for alias in f.metadata.get("aliases", ()):
                names[_norm(alias)] = f.name
        _NAMES_CACHE[cls] = names
    return names


#: Consumer settings a share consumer refuses (as Java's KafkaShareConsumer does),
#: with where the matter is decided for share groups.
_NOT_FOR_SHARE_GROUPS = {
    "auto_offset_reset": "a share group starts where its group config "
    "share.auto.offset.reset says (latest by default; Admin.alter_group_configs sets it)",
    "enable_auto_commit": "share consumers acknowledge records instead "
    "(share.acknowledgement.mode)",
    "auto_commit_interval_ms": "share consumers acknowledge records instead "
    "(share.acknowledgement.mode)",
    "group_instance_id": "share groups have no static members",
    "isolation_level": "it is the group config share.isolation.level",
    "partition_assignment_strategy": "the share group coordinator assigns partitions",
    "group_protocol": "a share consumer always speaks the share group protocol (KIP-932)",
    "group_remote_assignor": "the share group coordinator's assignor is a broker setting",
    "session_timeout_ms": "it is the broker's group.share.session.timeout.ms",
    "heartbeat_interval_ms": "it is the broker's group.share.heartbeat.interval.ms",
    "max_partition_fetch_bytes": "ShareFetch has no per-partition limit (fetch.max.bytes bounds it)",
    "enable_incremental_fetch_sessions": "ShareFetch always uses share sessions (KIP-932)",
    "enable_partition_eof": "records are shared, so a member has no partition end to reach "
    "(librdkafka does not take it for share consumers either)",
}


#: Other clients' settings (librdkafka's, confluent-kafka's callbacks, Java's)
#: that trafka does not take, because it cannot honour them as they are
#: defined, with what to use instead. Checked before any "did you mean": a
#: near name is the wrong advice for these. Empty since issue #62: every
#: setting a service sets in practice is taken (:mod:`.config` says how).
_NOT_TAKEN: dict[str, str] = {}
_NOT_TAKEN_NORM = {_norm(k): v for k, v in _NOT_TAKEN.items()}


def refused_settings() -> dict[str, str]:
    """Other clients' settings trafka does not take (:data:`_NOT_TAKEN`), each
    with what to use instead: for the configuration reference."""
    return dict(_NOT_TAKEN)


def share_consumer_refusals() -> dict[str, str]:
    """The consumer settings a share consumer refuses (:data:`_NOT_FOR_SHARE_GROUPS`,
    by Python name), each with where share groups decide the matter."""
    return dict(_NOT_FOR_SHARE_GROUPS)
