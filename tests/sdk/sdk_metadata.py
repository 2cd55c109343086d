"""A metadata cache filled from a decoded Metadata answer, for the tests of the
I/O-free parts (fetcher, cores) that need topics and leaders but no broker."""

from __future__ import annotations

from trafka.codec.messages import k03_metadata as md
from trafka.sdk.metadata import MetadataCache


def one_topic_cache(
    topic: str = "t", partitions: int = 2, *, leader_epoch: int = 0
) -> MetadataCache:
    """A cache that knows broker 1 (``h:1``), leader of every partition of ``topic``."""
    M = md.MetadataResponse
    cache = MetadataCache()
    cache.update(
        M(
            brokers=[M.MetadataResponseBroker(node_id=1, host="h", port=1)],
            topics=[
                M.MetadataResponseTopic(
                    name=topic,
                    partitions=[
                        M.MetadataResponsePartition(
                            partition_index=i, leader_id=1, leader_epoch=leader_epoch
                        )
                        for i in range(partitions)
                    ],
                )
            ],
        ),
        now=0.0,
    )
    return cache
