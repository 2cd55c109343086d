"""Transaction markers in cluster mode: from a replicated decision to every partition's leader.

On one node the broker writes a completion's markers into its own logs. In a
cluster the partitions of a transaction are led by other brokers, and the
coordinator can die at any moment; :class:`MarkerQueue` is the coordinator's
bookkeeping for getting the markers written (Kafka's transaction marker
channel), without I/O: the driver sends the WriteTxnMarkers requests it asks for
and reports what came back.

Rules and invariants:

* A completion waits until its decision (the PrepareCommit/PrepareAbort
  record) is on the in-sync replicas of its ``__transaction_state`` partition:
  the partition's high watermark has reached the log end recorded when the
  completion was queued. A marker written before that could contradict the
  decision of the next coordinator, had this one died with its decision
  unreplicated.
* Then every partition of the transaction gets its marker from its current
  leader: one WriteTxnMarkers request per leader per round, with at most one
  entry per producer id (answers are keyed by producer id). The leader answers
  once the marker is on its own in-sync replicas. Each marker says its
  transaction version (WriteTxnMarkers v2, KIP-1228): 2 for a decision of
  transaction version 2, whose epoch the coordinator bumped.
* A partition's answer: NONE, or UNKNOWN_TOPIC_OR_PARTITION (deleted since it
  joined the transaction): done. TRANSACTION_COORDINATOR_FENCED or
  INVALID_PRODUCER_EPOCH: a newer coordinator, or a newer epoch of the producer,
  has written there; the completion is abandoned and the transaction stays
  prepared for whoever coordinates it now. Anything else (NOT_LEADER_OR_FOLLOWER,
  no leader, a lost connection, a timeout): tried again after
  ``retry_backoff_ms``, with the leader looked up afresh.
* When every partition is done, :meth:`MarkerQueue.answered` returns the
  completion, and the coordinator records it complete.
* Queueing a completion for an id that has one queued replaces it, unless it
  is the same outcome for the same producer epoch (the coordinator's retry timer
  issuing it again): then the one queued goes on. Answers for a replaced or
  dropped completion are ignored.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Callable, Iterable

from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k27_write_txn_markers as m

from .coordinator import TxnCompletion

__all__ = ["MarkerQueue", "MarkerRequest"]

log = logging.getLogger("trafka.brokerlite.transactions")

# WriteTxnMarkers v2's transaction version of a marker (KIP-1228): 2 for a
# decision that bumped the epoch (the leader then wants an epoch above its own).
_TV1, _TV2 = 1, 2

_DONE = frozenset({ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION})
_ABANDON = frozenset({ErrorCode.TRANSACTION_COORDINATOR_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH})

Partition = tuple[str, int]


@dataclasses.dataclass(slots=True, eq=False)
class _Pending:
    completion: TxnCompletion
    state_partition: int  # of __transaction_state
    required: int  # the high watermark its decision needs
    left: set[Partition]
    retry_at: dict[Partition, int]  # not before (ms)
    in_flight: set[Partition] = dataclasses.field(default_factory=set)


@dataclasses.dataclass(frozen=True, slots=True)
class MarkerRequest:
    """One WriteTxnMarkers request for the driver to send.

    Attributes:
        request_id: to report the answer with.
        node: the broker to send it to.
        body: the request (version 2: each marker says its transaction version).
    """

    request_id: int
    node: int
    body: m.WriteTxnMarkersRequest


class MarkerQueue:
    """Completions on their way to their partitions' leaders (see the module rules).

    Args:
        retry_backoff_ms: how long a partition waits before its marker is sent again.
    """

    def __init__(self, *, retry_backoff_ms: int = 100) -> None:
        self._retry_ms = retry_backoff_ms
        self._pending: dict[str, _Pending] = {}
        self._requests: dict[int, list[tuple[_Pending, tuple[Partition, ...]]]] = {}
        self._ids = itertools.count(1)

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, completion: TxnCompletion, state_partition: int, required: int) -> None:
        """Queue a completion whose decision is in ``__transaction_state-state_partition``
        below offset ``required``."""
        tid = completion.transactional_id
        queued = self._pending.get(tid)
        if queued is not None:
            prev = queued.completion
            if (prev.producer_id, prev.producer_epoch, prev.commit) == (
                completion.producer_id,
                completion.producer_epoch,
                completion.commit,
            ):
                return
        partitions = {(mk.topic, mk.partition) for mk in completion.markers}
        self._pending[tid] = _Pending(
            completion, state_partition, required, partitions, dict.fromkeys(partitions, 0)
        )

    def drop(self, transactional_ids: Iterable[str]) -> None:
        """Forget the completions of ids no longer coordinated here."""
        for tid in transactional_ids:
            self._pending.pop(tid, None)

    def requests(
        self,
        now_ms: int,
        high_watermark: Callable[[int], int],
        leader_of: Callable[[str, int], int],
    ) -> list[MarkerRequest]:
        """The WriteTxnMarkers requests to send now.

        Args:
            now_ms: the current time.
            high_watermark: of a ``__transaction_state`` partition here (-1 when
                this broker does not lead it).
            leader_of: the leader of a partition, -1 when it has none.
        """
        by_node: dict[int, dict[int, tuple[_Pending, list[Partition]]]] = {}
        for pending in self._pending.values():
            if high_watermark(pending.state_partition) < pending.required:
                continue  # the decision is not on the in-sync replicas yet
            pid = pending.completion.producer_id
            for tp in sorted(pending.left - pending.in_flight):
                if pending.retry_at[tp] > now_ms:
                    continue
                node = leader_of(*tp)
                if node < 0:
                    pending.retry_at[tp] = now_ms + self._retry_ms
                    continue
                entries = by_node.setdefault(node, {})
                entry = entries.get(pid)
                if entry is None:
                    entries[pid] = (pending, [tp])
                elif entry[0] is pending:
                    entry[1].append(tp)
                # else: another id's completion with this producer id goes first
        out: list[MarkerRequest] = []
        for node, entries in sorted(by_node.items()):
            request_id = next(self._ids)
            markers = []
            sent: list[tuple[_Pending, tuple[Partition, ...]]] = []
            for pending, tps in entries.values():
                c = pending.completion
                topics: dict[str, list[int]] = {}
                for t, p in tps:
                    topics.setdefault(t, []).append(p)
                markers.append(
                    m.WriteTxnMarkersRequest.WritableTxnMarker(
                        producer_id=c.producer_id,
                        producer_epoch=c.producer_epoch,
                        transaction_result=c.commit,
                        topics=[
                            m.WriteTxnMarkersRequest.WritableTxnMarkerTopic(
                                name=t, partition_indexes=ps
                            )
                            for t, ps in topics.items()
                        ],
                        coordinator_epoch=c.coordinator_epoch,
                        transaction_version=_TV2 if c.tv2 else _TV1,
                    )
                )
                pending.in_flight.update(tps)
                sent.append((pending, tuple(tps)))
            self._requests[request_id] = sent
            log.debug(
                "markers request %d to broker %d: %s",
                request_id,
                node,
                [(p.completion.transactional_id, tps) for p, tps in sent],
            )
            out.append(MarkerRequest(request_id, node, m.WriteTxnMarkersRequest(markers=markers)))
        return out

    def answered(
        self, request_id: int, response: m.WriteTxnMarkersResponse, now_ms: int
    ) -> list[TxnCompletion]:
        """Take a leader's answer.

        Returns:
            The completions whose every marker is now written.
        """
        sent = self._requests.pop(request_id, [])
        log.debug("markers request %d answered: %s", request_id, response)
        codes: dict[tuple[int, str, int], ErrorCode] = {}
        for marker in response.markers:
            for topic in marker.topics:
                for part in topic.partitions:
                    key = (marker.producer_id, topic.name, part.partition_index)
                    codes[key] = ErrorCode(part.error_code)
        done: list[TxnCompletion] = []
        for pending, tps in sent:
            if self._pending.get(pending.completion.transactional_id) is not pending:
                continue  # replaced or dropped meanwhile
            pid = pending.completion.producer_id
            for tp in tps:
                pending.in_flight.discard(tp)
                code = codes.get((pid, *tp), ErrorCode.UNKNOWN_SERVER_ERROR)
                if code in _DONE:
                    pending.left.discard(tp)
                elif code in _ABANDON:
                    self._abandon(pending, tp, code)
                    break
                else:
                    log.debug("marker for %s-%d: %s; will retry", tp[0], tp[1], code.name)
                    pending.retry_at[tp] = now_ms + self._retry_ms
            else:
                if not pending.left:
                    del self._pending[pending.completion.transactional_id]
                    done.append(pending.completion)
        return done

    def failed(self, request_id: int, now_ms: int) -> None:
        """A request got no answer (connection lost, timeout): its markers go again."""
        for pending, tps in self._requests.pop(request_id, []):
            for tp in tps:
                pending.in_flight.discard(tp)
                pending.retry_at[tp] = now_ms + self._retry_ms

    def _abandon(self, pending: _Pending, tp: Partition, code: ErrorCode) -> None:
        c = pending.completion
        log.warning(
            "transaction %r: %s-%d refused its %s marker (%s); leaving the transaction to "
            "its current coordinator",
            c.transactional_id,
            tp[0],
            tp[1],
            "COMMIT" if c.commit else "ABORT",
            code.name,
        )
        del self._pending[c.transactional_id]
