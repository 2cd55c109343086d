"""Key routing's counters (:class:`RouteStats`): what it decided and what failed,
read by ``RunningProxy.statistics.routing`` and the proxy's metrics."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from ..filters import Sample

__all__ = ["RouteStats", "samples"]


@dataclass(slots=True)
class RouteStats:
    """Counts of the routing decisions (for ``statistics()`` and logs)."""

    records_moved: int = 0
    records_kept: int = 0
    batches_rebuilt: int = 0
    batches_untouched_idempotent: int = 0
    batches_untouched_other_leader: int = 0
    batches_untouched_unknown_leader: int = 0
    batches_untouched_unknown_topic: int = 0
    batches_untouched_malformed: int = 0
    requests_pooled: int = 0
    requests_split: int = 0
    requests_idempotent: int = 0
    batches_retried: int = 0
    batches_out_of_order: int = 0
    batches_recovered: int = 0  # retried after a restart, known from the journal
    records_not_rewritten: int = 0  # of those, written before the restart
    parts_failed: int = 0
    # Not written: an earlier batch of their partition unanswered on a lost connection.
    batches_held: int = 0
    partitions_rerouted: int = 0  # refused by a former leader, written by the new one
    requests_too_large: int = 0
    # Coalescing (.coalesce): client requests whose pieces joined an accumulator,
    # and the upstream requests the accumulators sent.
    requests_coalesced: int = 0
    upstream_coalesced: int = 0
    sequence_lookups: int = 0
    moved_by_topic: dict[str, int] = field(default_factory=dict)
    kept_by_topic: dict[str, int] = field(default_factory=dict)

    def count(self, topic: str, moved: int, kept: int) -> None:
        """Records of ``topic`` placed: ``moved`` to their key's partition, ``kept``."""
        self.records_moved += moved
        self.records_kept += kept
        if moved:
            self.moved_by_topic[topic] = self.moved_by_topic.get(topic, 0) + moved
        if kept:
            self.kept_by_topic[topic] = self.kept_by_topic.get(topic, 0) + kept


def samples(stats: RouteStats) -> Iterator[Sample]:
    """Key routing's metrics (the table of :mod:`trafka.proxy.metrics`)."""
    routed = (
        "trafka_proxy_records_routed",
        "Records of routed Produce requests, moved to their key's partition or kept.",
    )
    for outcome, counts in (("moved", stats.moved_by_topic), ("kept", stats.kept_by_topic)):
        for topic, count in sorted(dict(counts).items()):
            yield Sample(*routed, (("topic", topic), ("outcome", outcome)), count)
    coalesced = (
        "trafka_proxy_produce_coalesced",
        "Plain producers' routed requests that joined a leader's accumulator (client), "
        "and the requests the accumulators sent (upstream).",
    )
    yield Sample(*coalesced, (("side", "client"),), stats.requests_coalesced)
    yield Sample(*coalesced, (("side", "upstream"),), stats.upstream_coalesced)
    # Among the proxy's own errors and flow control (see trafka.proxy.metrics).
    yield Sample("trafka_proxy_errors", "", (("kind", "part_failed"),), stats.parts_failed)
    yield Sample("trafka_proxy_errors", "", (("kind", "too_large"),), stats.requests_too_large)
    yield Sample("trafka_proxy_flow_control", "", (("kind", "held"),), stats.batches_held)
