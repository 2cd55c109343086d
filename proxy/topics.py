"""What the proxy knows of topics, I/O-free: partition counts and leaders, as
the Metadata answers passing through it (and its own Metadata requests) taught
it. The core keeps it (:mod:`.server` learns from every Metadata answer); filters
read it through :class:`~.filters.ProxyServices`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from trafka.codec.messages import k03_metadata as metadata_msgs

__all__ = ["Topics", "metadata_request"]


@dataclass(slots=True)
class Topics:
    """What the proxy learned from Metadata answers: partition counts, leaders,
    and the newest Metadata version a client used (for the proxy's own)."""

    partitions: dict[str, int] = field(default_factory=dict)
    leaders: dict[tuple[str, int], int] = field(default_factory=dict)
    metadata_version: int = -1

    def learn(self, body: Any, version: int = -1) -> None:
        self.metadata_version = max(self.metadata_version, version)
        for t in body.topics:
            if t.error_code or t.name is None:
                continue
            self.partitions[t.name] = len(t.partitions)
            for p in t.partitions:
                self.leaders[(t.name, p.partition_index)] = p.leader_id

    def leader(self, topic: str, partition: int) -> int:
        """The partition's leader, or -1 when unknown."""
        return self.leaders.get((topic, partition), -1)


def metadata_request(names: Iterable[str]) -> Any:
    """The proxy's own Metadata request for ``names`` (never creating topics)."""
    m = metadata_msgs.MetadataRequest
    return m(
        topics=[m.MetadataRequestTopic(name=n) for n in sorted(names)],
        allow_auto_topic_creation=False,
    )
