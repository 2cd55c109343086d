"""The records a share consumer acquired and has not handed out yet (KIP-932),
without I/O: :class:`RecordBuffer`, the share fetcher's (:mod:`.share_fetcher`).

Rules:

* Records wait in the order their fetches brought them, per partition and
  broker; :meth:`RecordBuffer.take` hands them out (they become *delivered*,
  :class:`~.share_acks.Deliveries`), :meth:`RecordBuffer.give_back` puts records
  taken but not handed out after all back first, in order.
* Records of partitions that left the assignment, and every record at close,
  are taken out as RELEASE acknowledgements for the broker that acquired them
  (:meth:`RecordBuffer.release`): never handed out.
* Renewing (AcknowledgeType.RENEW, KIP-1222): a record of the last take typed
  RENEW is kept (:meth:`RecordBuffer.renewing`) until its renewal is answered
  (:meth:`RecordBuffer.renewed`): renewed, it is buffered again, first, and
  delivered again by a later poll (as Kafka's Java client does); not renewed
  (an error, or the consumer closing), it is dropped. Typed again before the
  renewal leaves, it is no longer kept.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

from .consumer_types import TopicPartition
from .errors import UsageError
from .share_acks import AcknowledgeType, Deliveries
from .share_records import OFFSET, ShareRecord

__all__ = ["RecordBuffer"]

_RENEW = AcknowledgeType.RENEW


@dataclasses.dataclass(slots=True, eq=False)
class _Fetched:
    """Acquired records of one partition, handed out from ``index`` on."""

    node: int
    tp: TopicPartition
    records: list[ShareRecord]
    index: int = 0


class RecordBuffer:
    """Acquired records waiting for the application (see the module rules)."""

    __slots__ = ("_deliveries", "_fetched", "_renewing", "_taken")

    def __init__(self, deliveries: Deliveries) -> None:
        self._deliveries = deliveries
        self._fetched: deque[_Fetched] = deque()
        self._taken: list[ShareRecord] = []  # the last take's records
        self._renewing: dict[tuple[TopicPartition, int], ShareRecord] = {}

    def __bool__(self) -> bool:
        return bool(self._fetched)

    def add(self, node: int, tp: TopicPartition, records: list[ShareRecord]) -> None:
        """Records a fetch from ``node`` acquired, after those waiting."""
        self._fetched.append(_Fetched(node, tp, records))

    def take(self, max_records: int) -> list[ShareRecord]:
        """Up to ``max_records`` records, which become delivered."""
        out: list[ShareRecord] = []
        fetched, deliver = self._fetched, self._deliveries.deliver
        while fetched and len(out) < max_records:
            f = fetched[0]
            part = f.records[f.index : f.index + max_records - len(out)]
            f.index += len(part)
            deliver(f.node, f.tp, part)
            out.extend(part)
            if f.index >= len(f.records):
                fetched.popleft()
        self._taken = out
        return out

    def give_back(self, records: Sequence[ShareRecord]) -> None:
        """Records taken but not handed out after all: buffered again, in order, first."""
        for r in reversed(records):
            tp = TopicPartition(r.topic, r.partition)
            node = self._deliveries.undeliver(tp, r.offset)
            head = self._fetched[0] if self._fetched else None
            if head is not None and head.tp == tp and head.index > 0:
                head.index -= 1
                head.records[head.index] = r
            else:
                self._fetched.appendleft(_Fetched(node, tp, [r]))

    def release(
        self,
        add: Callable[[int, TopicPartition, Mapping[int, int]], None],
        gone: Collection[TopicPartition] | None = None,
    ) -> None:
        """Take out the records of the partitions ``gone`` (None: all), each
        handed to ``add(node, partition, offset -> RELEASE)``."""
        kept: deque[_Fetched] = deque()
        for f in self._fetched:
            if gone is None or f.tp in gone:
                add(f.node, f.tp, _released(f.records[f.index :]))
            else:
                kept.append(f)
        self._fetched = kept

    def type(self, tp: TopicPartition, offset: int, kind: int) -> None:
        """Type a delivered record (:meth:`.Deliveries.acknowledge`), keeping one typed
        RENEW (see the module rules).

        Raises:
            UsageError: the record was not delivered by the last poll (or its
                acknowledgement was already taken); RENEW: not of the last take.
        """
        if kind != _RENEW:
            self._deliveries.acknowledge(tp, offset, kind)
            if self._renewing:
                self._renewing.pop((tp, offset), None)
            return
        found = [r for r in self._taken if (r.offset, r.topic, r.partition) == (offset, *tp)]
        if not found:
            raise UsageError(
                f"{tp.topic}-{tp.partition} offset {offset} cannot be renewed: it was not "
                "handed out by the last poll"
            )
        self._deliveries.acknowledge(tp, offset, kind)
        self._renewing[tp, offset] = found[0]

    def renewed(self, node: int, tp: TopicPartition, acks: Mapping[int, int], ok: bool) -> None:
        """The broker answered acknowledgements of ``tp`` holding renewals: renewed
        (``ok``), their records are buffered again, first; else dropped."""
        if not self._renewing:
            return
        kept = [self._renewing.pop((tp, o), None) for o, k in sorted(acks.items()) if k == _RENEW]
        again = [r for r in kept if r is not None]
        if ok and again:
            self._fetched.appendleft(_Fetched(node, tp, again))


def _released(records: Iterable[ShareRecord]) -> dict[int, int]:
    return dict.fromkeys(map(OFFSET, records), AcknowledgeType.RELEASE)
