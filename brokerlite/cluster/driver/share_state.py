"""The driver of the share-partition leader's persister (KIP-932, cluster mode):
sends the ReadShareGroupState and WriteShareGroupState requests of
:mod:`trafka.brokerlite.shares.persister`, and the group coordinator's requests
of the share-group offsets admin (:mod:`trafka.brokerlite.shares.offsets_port`),
to the share coordinators and reports their answers to whoever made them.

Rules:

* A request goes to the leader of its key's ``__share_group_state`` partition,
  looked up when it is sent (the offsets admin's ListOffsets to the leader of
  its data partition: LEADER_NOT_AVAILABLE when there is none). While the topic does not exist, the first request
  has it created (``share.coordinator.state.topic.num.partitions`` partitions,
  compacted, as Kafka creates it on first use); requests without a coordinator
  are answered COORDINATOR_NOT_AVAILABLE here, and the persister retries them.
* One connection per coordinator, one request on it at a time, in the order
  they were taken (so a share-partition's snapshots arrive in order);
  coordinators are served concurrently.
* A failure (connection refused or lost, no answer within 30 s, an undecodable
  answer) is reported as COORDINATOR_NOT_AVAILABLE, and the connection is
  opened again for the next request.
* It touches the core only from the trio thread, and calls ``kick`` after
  each answer so that the server delivers the answers that became ready.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from trafka.codec.errors import CodecError, ErrorCode

from ...clock import now_ms
from ...shares.offsets_port import ClusterShareOffsets
from ...shares.persister import RemotePersister, StateRequest, StateRequestOwner
from ...storage.internal_topics import KAFKA_CONFIGS
from ..inter_broker import InterBrokerConnection
from ..view import SHARE_STATE_TOPIC, ZkTask

if TYPE_CHECKING:
    from ...broker import Broker

__all__ = ["ShareStateSender"]

log = logging.getLogger("trafka.brokerlite.shares")

_CREATE_WAIT_MS = 5_000


class ShareStateSender:
    """Sends a share-partition leader's state requests (see the module rules)."""

    def __init__(self, broker: Broker, kick: Callable[[], None]) -> None:
        assert broker.share_persister is not None and broker.cluster is not None
        self._broker = broker
        self._persister: RemotePersister = broker.share_persister
        admin = broker.share_offsets
        self._sources: list[StateRequestOwner] = [self._persister]
        if isinstance(admin, ClusterShareOffsets):
            self._sources.append(admin)
        self._kick = kick
        self._event = trio.Event()
        self._queues: dict[int, trio.MemorySendChannel[StateRequest]] = {}
        self._creating: ZkTask | None = None

    def _wake(self) -> None:
        self._event.set()

    async def run(self) -> None:
        for source in self._sources:
            source.on_ready = self._wake
        try:
            async with trio.open_nursery() as nursery:
                while True:
                    now = now_ms()
                    for request in [r for source in self._sources for r in source.take(now)]:
                        node = self._destination(request)
                        if node is None:
                            missing = (
                                ErrorCode.COORDINATOR_NOT_AVAILABLE
                                if request.leader_of is None
                                else ErrorCode.LEADER_NOT_AVAILABLE
                            )
                            _owner(request, self._persister).answered(request, missing, None, now)
                            continue
                        queue = self._queues.get(node)
                        if queue is None:
                            queue, receive = trio.open_memory_channel[StateRequest](math.inf)
                            self._queues[node] = queue
                            nursery.start_soon(self._serve, node, receive)
                        queue.send_nowait(request)
                    self._kick()
                    retries = [source.next_retry() for source in self._sources]
                    retry = min((r for r in retries if r is not None), default=None)
                    timeout = math.inf if retry is None else max(retry - now_ms(), 0) / 1000
                    with trio.move_on_after(timeout):
                        await self._event.wait()
                    self._event = trio.Event()
        finally:
            for source in self._sources:
                source.on_ready = lambda: None

    def _destination(self, request: StateRequest) -> int | None:
        cluster = self._broker.cluster
        assert cluster is not None
        if request.leader_of is not None:
            leader = cluster.leader(*request.leader_of)
            return leader if leader is not None and leader >= 0 else None
        if SHARE_STATE_TOPIC not in cluster.image.topics:
            if self._creating is None or self._creating.done:
                config = self._broker.config
                self._creating = cluster.submit(
                    "create_topic",
                    name=SHARE_STATE_TOPIC,
                    num_partitions=config.share_coordinator_state_topic_num_partitions,
                    replication_factor=-1,
                    # Kafka's configs, but compacted: brokerlite's share
                    # coordinator writes a whole snapshot per key and relies on
                    # compaction (Kafka's prunes its log with DeleteRecords).
                    configs={**KAFKA_CONFIGS[SHARE_STATE_TOPIC], "cleanup.policy": "compact"},
                    quiet=True,
                    if_missing=True,
                    timeout_ms=_CREATE_WAIT_MS,
                )
            return None
        self._creating = None
        node = cluster.coordinator(request.coordinator_key, topic=SHARE_STATE_TOPIC)
        return None if node < 0 or cluster.broker(node) is None else node

    async def _serve(self, node: int, receive: trio.MemoryReceiveChannel[StateRequest]) -> None:
        conn: InterBrokerConnection | None = None
        try:
            async for request in receive:
                try:
                    if conn is None:
                        conn = await InterBrokerConnection.to_node(self._broker, node, "share")
                    answer = await conn.request(
                        request.api_key, request.body, version=request.version
                    )
                except (OSError, ConnectionError, CodecError, trio.TooSlowError) as exc:
                    log.debug("share state with broker %d: %s", node, exc)
                    if conn is not None:
                        await conn.aclose()
                        conn = None
                    _owner(request, self._persister).answered(
                        request, ErrorCode.COORDINATOR_NOT_AVAILABLE, None, now_ms()
                    )
                else:
                    code, payload = _result(answer)
                    _owner(request, self._persister).answered(request, code, payload, now_ms())
                self._kick()
        finally:
            if conn is not None:
                with trio.CancelScope(shield=True):
                    await conn.aclose()


def _owner(request: StateRequest, persister: RemotePersister) -> StateRequestOwner:
    return request.owner if request.owner is not None else persister


def _result(answer: Any) -> tuple[ErrorCode, Any]:
    """The one partition's code and result of a share-state answer (keys 83-86)
    or of a ListOffsets."""
    topics: Any = answer.topics if hasattr(answer, "topics") else answer.results
    for topic in topics:
        for partition in topic.partitions:
            return ErrorCode.of(partition.error_code), partition
    return ErrorCode.UNKNOWN_SERVER_ERROR, None
