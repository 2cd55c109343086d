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

from .config_values import _dotted

if TYPE_CHECKING:
    from .config import ClientConfig


def _norm(key: str) -> str:
    return key.strip().lower().replace(".", "_").replace("-", "_")


_NAMES_CACHE: dict[type, dict[str, str]] = {}


def _names(cls: type[ClientConfig]) -> dict[str, str]:
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


_QUEUE_BYTES = (
    "trafka bounds the producer's buffer in bytes with buffer.memory, and a full "
    "buffer makes send() wait up to max.block.ms instead of failing at once"
)
_LOGGING = (
    "trafka logs through Python's logging (logger 'trafka.sdk'): set levels and handlers there"
)
_METRIC_WINDOW = (
    "trafka's windowed metrics (rates, -avg, -max) use Java's defaults: 2 samples of 30 s"
)
_NO_VERSION_GUESS = (
    "trafka always asks each broker for its API versions (ApiVersions) and never "
    "guesses them: remove it"
)

#: Other clients' settings (librdkafka's, confluent-kafka's callbacks, Java's)
#: that trafka does not take, because it cannot honour them as they are
#: defined, with what to use instead. Checked before any "did you mean": a
#: near name is the wrong advice for these (enable.auto.offset.store is not
#: auto.offset.reset).
_NOT_TAKEN = {
    "on_delivery": "pass on_delivery=cb to each send(): cb(error, metadata) per record",
    "dr_cb": "pass on_delivery=cb to each send(): cb(error, metadata) per record",
    "dr_msg_cb": "pass on_delivery=cb to each send(): cb(error, metadata) per record",
    "delivery.report.only.error": "trafka reports every record to on_delivery; skip the "
    "successes (error None) in the callback",
    "stats_cb": "call statistics() on the client, or serve metrics with metrics.listen",
    "statistics.interval.ms": "call statistics() on the client, or serve metrics with "
    "metrics.listen",
    "throttle_cb": "broker throttling is counted in statistics()",
    "metrics.num.samples": _METRIC_WINDOW,
    "metrics.sample.window.ms": _METRIC_WINDOW,
    "metrics.recording.level": "trafka keeps all of its metrics, none per record: remove it",
    "metric.reporters": "serve the client's metrics with metrics.listen (Prometheus), "
    "or read statistics()",
    "oauth_cb": "give sasl_oauth_token_provider (see trafka.sdk.oauth for what it returns)",
    "logger": _LOGGING,
    "log_level": _LOGGING,
    "debug": _LOGGING,
    "queue.buffering.max.messages": f"{_QUEUE_BYTES}; there is no bound in records",
    "queue.buffering.max.kbytes": f"{_QUEUE_BYTES}; use buffer.memory (in bytes)",
    "batch.num.messages": "trafka's batches are bounded in bytes only: use batch.size",
    "message.max.bytes": "the producer's largest request is max.request.size; the "
    "consumer's largest response is receive.message.max.bytes",
    "socket.timeout.ms": "use request.timeout.ms: how long trafka waits for any response",
    "socket.keepalive.enable": "trafka does not set SO_KEEPALIVE; idle connections are "
    "closed after connections.max.idle.ms",
    "socket.send.buffer.bytes": "trafka leaves socket buffer sizes to the operating system",
    "socket.receive.buffer.bytes": "trafka leaves socket buffer sizes to the operating system",
    "send.buffer.bytes": "trafka leaves socket buffer sizes to the operating system",
    "receive.buffer.bytes": "trafka leaves socket buffer sizes to the operating system",
    "topic.metadata.refresh.interval.ms": "use metadata.max.age.ms: metadata older than "
    "it is refreshed (librdkafka's -1, never, is not available)",
    "queued.min.messages": "trafka has no local consumer queue thresholds: "
    "fetch.max.bytes and max.partition.fetch.bytes size its fetches",
    "queued.max.messages.kbytes": "trafka has no local consumer queue thresholds: "
    "fetch.max.bytes and max.partition.fetch.bytes size its fetches",
    "api.version.request": _NO_VERSION_GUESS,
    "broker.version.fallback": _NO_VERSION_GUESS,
    "api.version.fallback.ms": _NO_VERSION_GUESS,
}
_NOT_TAKEN_NORM = {_norm(k): v for k, v in _NOT_TAKEN.items()}


def refused_settings() -> dict[str, str]:
    """Other clients' settings trafka does not take (:data:`_NOT_TAKEN`), each
    with what to use instead: for the configuration reference."""
    return dict(_NOT_TAKEN)


def share_consumer_refusals() -> dict[str, str]:
    """The consumer settings a share consumer refuses (:data:`_NOT_FOR_SHARE_GROUPS`,
    by Python name), each with where share groups decide the matter."""
    return dict(_NOT_FOR_SHARE_GROUPS)
