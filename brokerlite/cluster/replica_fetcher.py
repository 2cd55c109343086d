"""Replica fetchers: how a follower copies its leaders' logs. A driver (trio and
sockets); what a follower may do is the replica manager's (:mod:`.replica_manager`).

Rules and invariants:

* One :class:`ReplicaFetcher` per leader this broker follows partitions of,
  over one connection (:class:`~.inter_broker.InterBrokerConnection`: one request at a time,
  Kafka's framing, no pipelining), as long as any partition is followed there.
* A partition whose leader or epoch changed is first reconciled: the follower
  asks the leader ``OffsetForLeaderEpoch`` for its own latest epoch and
  truncates its log to where both agree (the end of that epoch at the leader,
  or, when the leader answers an older epoch, the end of that epoch here).
  Only then does it fetch.
* Fetches (Fetch v12 with ``replica_id``) ask for every reconciled partition
  at its log end offset, long-polling ``replica_fetch_wait_max_ms``, except the
  partitions the follower's replication throttle holds back
  (:mod:`.replication_quotas`, KIP-73); the bytes fetched for throttled
  partitions count against it. What comes
  back is appended exactly as the leader stored it (through the producer
  states, so a follower that leads next deduplicates as its leader did), then
  the leader's high watermark is taken, bounded by the local log end.
* The fetches run in an incremental fetch session with the leader (KIP-227, as
  Kafka's replica fetchers do; the client's bookkeeping,
  :class:`trafka.sdk.fetch_sessions.FetchSession`): after the first full fetch,
  a request names only the partitions whose fetch position changed (those that
  got records) and forgets those no longer fetched here; the answer names only
  the partitions with news (records, a new high watermark or log start, an
  error). A partition an answer leaves out has nothing new. A session error
  (the leader restarted, evicted it) is followed at once by a full fetch that
  asks for a new session; a lost connection closes the session at the next
  request.
* An answer is only applied if the partition still follows the same leader at
  the same epoch, and its log end has not moved meanwhile.
* OFFSET_OUT_OF_RANGE: below the leader's log start, the log restarts there
  (empty); past the leader's log end, the partition is reconciled again.
* Each request has the connection's deadline
  (:data:`~.inter_broker.REQUEST_TIMEOUT_S`, Kafka's ``replica.socket.timeout.ms``),
  a fetch's plus its long poll; one that passes it loses the connection.
* A lost connection is reopened after a short pause; nothing here ever
  blocks the broker's other work: every wait is a trio checkpoint.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

import trio

from trafka.codec import ApiKey
from trafka.codec.errors import CodecError, ErrorCode
from trafka.codec.messages import k01_fetch as fetch_msg
from trafka.codec.messages import k02_list_offsets as list_offsets_msg
from trafka.codec.messages import k23_offset_for_leader_epoch as epoch_msg
from trafka.sdk.consumer_types import TopicPartition
from trafka.sdk.fetch_sessions import SESSION_ERRORS, FetchSession, SessionPartition

from ..clock import now_ms
from ..errors import BrokerError
from .inter_broker import REQUEST_TIMEOUT_S, InterBrokerAuthError, InterBrokerConnection

if TYPE_CHECKING:
    from ..broker import Broker

__all__ = ["ReplicaFetcher"]

log = logging.getLogger("trafka.brokerlite.cluster")

_FETCH_BACKOFF_S = 0.2
# A refused login is a misconfiguration: retried, but ever more slowly, up to this.
_AUTH_BACKOFF_MAX_S = 5.0
_FETCH_VERSION = 12
_EPOCH_VERSION = 4
_LIST_OFFSETS_VERSION = 7
_NO_TOPIC_ID = uuid.UUID(int=0)  # Fetch v12 names topics


class ReplicaFetcher:
    """Fetches every partition this broker follows from one leader (see the module rules)."""

    def __init__(self, broker: Broker, leader: int) -> None:
        assert broker.cluster is not None
        self.leader = leader
        self.broker = broker
        self.view = broker.cluster
        self.replicas = broker.cluster.replicas
        self.node_id = broker.node_id
        self.config = broker.config
        #: The incremental fetch session with the leader (see the module rules).
        self.session = FetchSession(leader)
        self._refusal_told = False  # the leader's refusal is logged once, until it lifts

    def _mine(self) -> list[Any]:
        return self.replicas.follower_fetches(self.leader)

    async def run(self) -> None:
        conn: InterBrokerConnection | None = None
        auth_backoff = 0.0
        try:
            while mine := self._mine():
                if conn is None:
                    try:
                        conn = await InterBrokerConnection.to_node(
                            self.broker, self.leader, "fetcher"
                        )
                        auth_backoff = 0.0
                    except InterBrokerAuthError as exc:
                        # Logged every time: the operator must see why this broker
                        # stays out of the ISR. Never retried as anyone else.
                        auth_backoff = min(
                            max(auth_backoff * 2, _FETCH_BACKOFF_S), _AUTH_BACKOFF_MAX_S
                        )
                        log.error(
                            "broker %d cannot replicate from leader %d: %s (retrying in %.1f s)",
                            self.node_id,
                            self.leader,
                            exc,
                            auth_backoff,
                        )
                        await trio.sleep(auth_backoff)
                        continue
                    except (OSError, trio.TooSlowError) as exc:
                        log.debug("fetcher for leader %d: cannot connect: %s", self.leader, exc)
                        await trio.sleep(_FETCH_BACKOFF_S)
                        continue
                    continue  # what it follows may have changed while it connected
                try:
                    # Each request's deadline is the connection's (the fetch's
                    # includes its long poll).
                    progressed = await self._round(conn, mine)
                except (
                    OSError,
                    ConnectionError,
                    CodecError,
                    trio.TooSlowError,
                    trio.BrokenResourceError,
                ) as exc:
                    log.info("fetcher for leader %d: connection lost: %s", self.leader, exc)
                    self.session.handle_error()
                    await conn.aclose()
                    conn = None
                    await trio.sleep(_FETCH_BACKOFF_S)
                    continue
                if not progressed:
                    await trio.sleep(_FETCH_BACKOFF_S)
        finally:
            if conn is not None:
                with trio.CancelScope(shield=True):
                    await conn.aclose()

    async def _round(self, conn: InterBrokerConnection, mine: list[Any]) -> bool:
        """One round over ``mine`` (what it follows, just taken): reconcile what needs
        it, then one fetch. False when it must back off."""
        truncating = [f for f in mine if f.needs_truncation]
        if truncating:
            await self._reconcile(conn, truncating)
            mine = self._mine()
        # The follower's replication throttle (KIP-73) leaves out the partitions
        # it holds back: throttled, out of sync, the quota exceeded.
        quota = self.view.replication_quotas.follower
        wanted = [
            f
            for f in mine
            if not f.needs_truncation
            and not quota.holds_back(
                f.topic, f.partition, in_sync=self.replicas.follower_in_sync(f.topic, f.partition)
            )
        ]
        if not wanted:
            return False
        return await self._fetch(conn, wanted)

    async def _reconcile(self, conn: InterBrokerConnection, follows: list[Any]) -> None:
        logs = self.broker.logs
        topics: dict[str, list[Any]] = {}
        asked: dict[tuple[str, int], tuple[Any, int]] = {}
        for f in follows:
            plog = logs.partition(f.topic, f.partition)
            epoch = plog.latest_epoch
            asked[(f.topic, f.partition)] = (f, epoch)
            topics.setdefault(f.topic, []).append(
                epoch_msg.OffsetForLeaderEpochRequest.OffsetForLeaderPartition(
                    partition=f.partition,
                    current_leader_epoch=f.leader_epoch,
                    leader_epoch=epoch,
                )
            )
        request = epoch_msg.OffsetForLeaderEpochRequest(
            replica_id=self.node_id,
            topics=[
                epoch_msg.OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=t, partitions=ps)
                for t, ps in topics.items()
            ],
        )
        response = await conn.request(
            ApiKey.OFFSET_FOR_LEADER_EPOCH, request, version=_EPOCH_VERSION
        )
        for topic in response.topics:
            for part in topic.partitions:
                key = (topic.topic, part.partition)
                if key not in asked:
                    continue
                f, epoch = asked[key]
                if not self.replicas.is_current_follower(
                    f.topic, f.partition, f.leader, f.leader_epoch
                ):
                    continue
                if part.error_code != ErrorCode.NONE:
                    log.debug(
                        "%s-%d: OffsetForLeaderEpoch: %s", *key, ErrorCode(part.error_code).name
                    )
                    continue
                plog = logs.partition(*key)
                if epoch < 0 or part.leader_epoch < 0:
                    # Nothing to compare (an empty log here, or an epoch the leader no
                    # longer has): keep what the high watermark vouches for.
                    target = plog.high_watermark if epoch >= 0 else plog.log_end_offset
                elif part.leader_epoch < epoch:
                    own_end = plog.end_offset_for_epoch(part.leader_epoch)[1]
                    target = min(part.end_offset, own_end if own_end >= 0 else plog.log_end_offset)
                else:
                    target = min(part.end_offset, plog.log_end_offset)
                self.replicas.truncated(f.topic, f.partition, max(target, 0))

    async def _fetch(self, conn: InterBrokerConnection, wanted: list[Any]) -> bool:
        request, sent = self._fetch_request(wanted)
        response = await conn.request(
            ApiKey.FETCH,
            request,
            version=_FETCH_VERSION,
            timeout=self.config.replica_fetch_wait_max_ms / 1000 + REQUEST_TIMEOUT_S,
        )
        usable, problem = self.session.handle_response(response, _FETCH_VERSION)
        if not usable:
            if problem is not None:
                log.info("fetcher for leader %d: %s", self.leader, problem)
            # A session error is mended by the full fetch that follows at once.
            return response.error_code in SESSION_ERRORS
        logs = self.broker.logs
        progressed = True
        quota = self.view.replication_quotas.follower
        now = now_ms()
        for topic in response.responses:
            for part in topic.partitions:
                key = (topic.topic, part.partition_index)
                if key not in sent:
                    continue
                f, offset = sent[key]
                if not self.replicas.is_current_follower(
                    f.topic, f.partition, f.leader, f.leader_epoch
                ):
                    continue
                plog = logs.partition(*key)
                if plog.log_end_offset != offset:
                    continue  # truncated meanwhile
                code = part.error_code
                if code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    await self._out_of_range(conn, f, offset)
                    continue
                if code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                    # Kafka's answer to a follower without ClusterAction on the cluster.
                    if not self._refusal_told:
                        log.error(
                            "broker %d cannot replicate %s-%d: leader %d refuses its fetch "
                            "(TOPIC_AUTHORIZATION_FAILED): the inter-broker principal needs "
                            "ClusterAction on the cluster, or to be one of super.users",
                            self.node_id,
                            *key,
                            self.leader,
                        )
                        self._refusal_told = True
                    progressed = False
                    continue
                if code != ErrorCode.NONE:
                    log.debug("%s-%d: fetch from %d: %s", *key, self.leader, ErrorCode(code).name)
                    progressed = False
                    continue
                self._refusal_told = False
                records = part.records
                if records:
                    try:
                        self.broker.producers.append_replicated(
                            f.topic, f.partition, records, now_ms=now
                        )
                    except BrokerError as exc:
                        log.warning(
                            "%s-%d: cannot append what leader %d sent: %s", *key, self.leader, exc
                        )
                        progressed = False
                        continue
                    if quota.is_throttled(f.topic, f.partition):
                        quota.record(len(records))
                self.replicas.follower_high_watermark(f.topic, f.partition, part.high_watermark)
                self._follow_log_start(f.topic, f.partition, plog, part.log_start_offset)
        return progressed

    def _fetch_request(
        self, wanted: list[Any]
    ) -> tuple[Any, dict[tuple[str, int], tuple[Any, int]]]:
        """The Fetch of ``wanted`` (in this fetcher's session: only what changed
        since its last request, KIP-227), and what was asked of each partition:
        its fetch, and the log end it was asked from."""
        logs = self.broker.logs
        cfg = self.config
        asked: dict[TopicPartition, SessionPartition] = {}
        sent: dict[tuple[str, int], tuple[Any, int]] = {}
        epochs: dict[TopicPartition, int] = {}
        for f in wanted:
            plog = logs.partition(f.topic, f.partition)
            offset = plog.log_end_offset
            tp = TopicPartition(f.topic, f.partition)
            sent[tp] = (f, offset)
            epochs[tp] = plog.latest_epoch
            asked[tp] = SessionPartition(
                _NO_TOPIC_ID,
                offset,
                plog.log_start_offset,
                cfg.replica_fetch_max_bytes,
                f.leader_epoch,
            )
        plan = self.session.build(asked)
        topics: dict[str, list[Any]] = {}
        for tp, want in plan.to_send.items():
            topics.setdefault(tp.topic, []).append(
                fetch_msg.FetchRequest.FetchPartition(
                    partition=tp.partition,
                    current_leader_epoch=want.leader_epoch,
                    fetch_offset=want.fetch_offset,
                    last_fetched_epoch=epochs[tp],
                    log_start_offset=want.log_start_offset,
                    partition_max_bytes=want.max_bytes,
                )
            )
        forgotten: dict[str, list[int]] = {}
        for tp, _ in plan.to_forget:
            forgotten.setdefault(tp.topic, []).append(tp.partition)
        request = fetch_msg.FetchRequest(
            replica_id=self.node_id,
            max_wait_ms=cfg.replica_fetch_wait_max_ms,
            min_bytes=1,
            max_bytes=10 * cfg.replica_fetch_max_bytes,
            isolation_level=0,
            session_id=plan.session_id,
            session_epoch=plan.epoch,
            topics=[
                fetch_msg.FetchRequest.FetchTopic(topic=t, partitions=ps)
                for t, ps in topics.items()
            ],
            forgotten_topics_data=[
                fetch_msg.FetchRequest.ForgottenTopic(topic=t, partitions=ps)
                for t, ps in forgotten.items()
            ],
        )
        return request, sent

    def _follow_log_start(self, topic: str, partition: int, plog: Any, leader_start: int) -> None:
        """A follower's log starts where its leader's does (DeleteRecords and retention
        at the leader), as far as its own high watermark allows."""
        start = min(leader_start, plog.high_watermark)
        if start > plog.log_start_offset:
            try:
                plog.delete_records(start)
            except BrokerError as exc:
                log.warning(
                    "%s-%d: cannot follow the leader's log start: %s", topic, partition, exc
                )
                return
            self.broker.producers.truncate_head(topic, partition)

    async def _out_of_range(self, conn: InterBrokerConnection, f: Any, offset: int) -> None:
        """The leader has no offset ``offset``: behind its log start (start over there)
        or past its log end (reconcile again)."""
        request = list_offsets_msg.ListOffsetsRequest(
            replica_id=self.node_id,
            isolation_level=0,
            topics=[
                list_offsets_msg.ListOffsetsRequest.ListOffsetsTopic(
                    name=f.topic,
                    partitions=[
                        list_offsets_msg.ListOffsetsRequest.ListOffsetsPartition(
                            partition_index=f.partition,
                            current_leader_epoch=f.leader_epoch,
                            timestamp=-2,
                        )
                    ],
                )
            ],
        )
        response = await conn.request(ApiKey.LIST_OFFSETS, request, version=_LIST_OFFSETS_VERSION)
        part = response.topics[0].partitions[0]
        if part.error_code != ErrorCode.NONE:
            return
        plog = self.broker.logs.partition(f.topic, f.partition)
        if offset < part.offset:
            log.info(
                "%s-%d: log end %d is below leader %d's log start %d: starting over there",
                f.topic,
                f.partition,
                offset,
                self.leader,
                part.offset,
            )
            plog.truncate_fully_and_start_at(part.offset)
            self.broker.producers.forget(f.topic, f.partition)
        else:
            replica = self.replicas.replica(f.topic, f.partition)
            if replica is not None:
                replica.needs_truncation = True
