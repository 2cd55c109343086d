"""A transactional read-process-write workload under faults, and its checker rules.

The feed: :class:`workload.Workload` itself (its idempotent producers writing
numbered records to the *source* topic all along, its consumer group reading
them), so a transactional run is checked for the promises of ``acks=all`` too.
The processor: a ``read_committed`` consumer in a group of its own and a transactional
producer (trafka's; or librdkafka's, or Kafka's Java client's: txn_clients.py). Each transaction takes what one poll returned, writes one
output record per input record to the *sink* topic,
``t<txn>:<partition>:<offset>:<input value>`` (the same key), sends the
consumer's positions to the transaction with the consumer's group metadata
(KIP-447), then commits; one in five (seeded) is aborted on purpose after its
records were flushed, so that aborted records are in the sink's log. After an
abort, or any error, the consumer goes back to the group's committed offsets;
after a fatal error (fenced, or a commit whose outcome it was not told) a new
producer with the same ``transactional.id`` takes over (``init_transactions``
completes or aborts what the old one left).

What the processor was told, per transaction: its outputs, the offsets sent
with it and its outcome: ``committed`` (``commit_transaction`` returned),
``aborted`` (``abort_transaction`` returned, or the commit was never asked for:
only an EndTxn(commit) can commit) or ``unknown`` (the commit was asked for and
raised).

The rules (:func:`check_transactions`), Kafka's promises for transactions
(KIP-98, KIP-447; https://kafka.apache.org/documentation/#semantics): a
``read_committed`` consumer sees all of a transaction's records or none;
none of an aborted one, all of a committed one; the offsets sent to a
transaction are committed if and only if it commits, so a group that resumes
from them processes every input exactly once:

* ``partial_txn``: a transaction with some, not all, of its outputs visible;
* ``aborted_visible``: an aborted transaction's outputs visible;
* ``committed_invisible``: a committed transaction's outputs not visible;
* ``processed_twice``: an input record whose output is visible more than once;
* ``offsets_without_outputs``: an input record below the group's committed
  offset whose output is not visible;
* ``outputs_past_offsets``: an output visible for an input record at or past
  the group's committed offset (its offsets were not committed with it);
* ``hanging``: a sink partition whose last stable offset stays below its high
  watermark once every transaction has ended (a transaction left open);
* ``txn_wrong_offset``: a committed output's delivery report naming an offset
  that does not hold it.

Diagnostics, printed under the report's header and asserted of nothing: each
time the processor resumed from the group's offsets below what an earlier
committed transaction had sent (its offsets were lost, or the group's
coordinator answered from stale state), and for the first inputs processed
more than once, every transaction that took them, with the offsets it sent and
those the processor had resumed from before it (trafka's and librdkafka's
processors record their rewinds; Java's does not).
"""

from __future__ import annotations

import dataclasses
import random
import traceback
from typing import Any

import trio
from checker import Report
from netlab import in_namespace
from txn_clients import JavaProcessor, LibrdkafkaProcessor
from workload import Told, Workload

from trafka.sdk import TopicPartition, open_consumer, open_producer
from trafka.sdk.errors import TrafkaError, TransactionFatalError

TXN_PROMISES = ("partial_txn", "aborted_visible", "committed_invisible", "processed_twice",
                "offsets_without_outputs", "outputs_past_offsets", "hanging",
                "txn_wrong_offset")  # fmt: skip


@dataclasses.dataclass
class Txn:
    outputs: list[bytes]
    offsets: dict[int, int]  # source partition -> the next offset, sent with it
    outcome: str = "open"
    reports: dict[bytes, tuple[int, int]] = dataclasses.field(default_factory=dict)
    #: the index in ``TxnTold.rewinds`` of the last rewind before it (-1: none)
    after_rewind: int = -1


@dataclasses.dataclass
class TxnTold(Told):
    txns: list[Txn] = dataclasses.field(default_factory=list)
    errors: dict[str, int] = dataclasses.field(default_factory=dict)
    producers: int = 0
    #: each time the processor went back to the group's committed offsets: how many
    #: transactions it had begun by then, and the offsets it resumed from (source
    #: partition -> offset; -1 for none committed, the beginning). Diagnostics for
    #: ``processed_twice`` (trafka's and librdkafka's processors record them).
    rewinds: list[tuple[int, dict[int, int]]] = dataclasses.field(default_factory=list)


class TxnWorkload(Workload):
    """The feed and the processor (see the module), in the thread and namespace
    :class:`workload.Workload` gives them."""

    def __init__(self, bootstrap: str, source: str, sink: str, partitions: int, group: str,
                 seed: int, netns: str | None = None, abort_ratio: float = 0.2,
                 client: str = "trafka", java: Any = None,
                 request_timeout_ms: int = 10_000, interval: float = 0.01) -> None:  # fmt: skip
        """``client``: the processor's (``trafka``, ``librdkafka`` or ``java``,
        txn_clients.py; ``java`` takes ``java``, a (root directory, spawn on the
        clients' host) pair). ``request_timeout_ms``: the feed's clients' (the
        processor's is 5 s). ``interval``: the feed's pace (:class:`workload.Workload`)."""
        super().__init__(bootstrap, source, partitions, group, netns=netns,
                         request_timeout_ms=request_timeout_ms, interval=interval)  # fmt: skip
        self.client = client
        self.txn_group = f"{group}-txn"
        self.sink = sink
        self.rng = random.Random(seed)
        self.abort_ratio = abort_ratio
        self.told: TxnTold = TxnTold()
        self.java = JavaProcessor(self, *java) if client == "java" else None

    def progress(self) -> int:
        """How far the workload got: transactions committed (x 20, to compare with
        a record count: 3 commits count as 50 records)."""
        if self.java is not None:
            self.java.read()
        return 20 * sum(t.outcome == "committed" for t in self.told.txns)

    async def _run(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(super()._run)
            if self.client == "trafka":
                nursery.start_soon(self._process)
            elif self.client == "librdkafka":
                nursery.start_soon(trio.to_thread.run_sync, self._process_librdkafka)
            else:
                assert self.java is not None
                self.java.start()
                await trio.to_thread.run_sync(self._stop.wait)
                await trio.to_thread.run_sync(self.java.stop)

    def _process_librdkafka(self) -> None:
        with in_namespace(self.netns):  # a worker thread of trio's, shared
            LibrdkafkaProcessor(self, self._stop.is_set).run()

    def _error(self, exc: BaseException) -> None:
        name = type(exc).__name__
        self.told.errors[name] = self.told.errors.get(name, 0) + 1
        if not isinstance(exc, TrafkaError):  # no client's answer: a bug to read
            traceback.print_exception(exc)

    async def _process(self) -> None:
        async with open_consumer(
            self.topic,
            bootstrap_servers=self.bootstrap,
            group_id=self.txn_group,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            request_timeout_ms=5_000,
            default_api_timeout_ms=15_000,
        ) as consumer:
            while not await self._stopped():
                self.told.producers += 1
                async with open_producer(
                    bootstrap_servers=self.bootstrap,
                    transactional_id=f"tx-{self.txn_group}",
                    linger_ms=5,
                    request_timeout_ms=5_000,
                    delivery_timeout_ms=10_000,
                    max_block_ms=10_000,
                    transaction_timeout_ms=15_000,
                ) as producer:
                    try:
                        await producer.init_transactions()
                        await self._rewind(consumer)
                        while not await self._stopped():
                            if not await self._transaction(consumer, producer):
                                break
                    except Exception as exc:  # a new producer takes over
                        self._error(exc)

    async def _rewind(self, consumer: Any) -> None:
        """Back to the group's committed offsets (what was not committed is redone).
        A partition revoked while its offset was being read is skipped (seeking it
        raised KeyError, counted as the processor's error, under a long cut)."""
        resumed: dict[int, int] = {}
        for tp in list(consumer.assignment()):  # a copy: a rebalance may change it
            offset = await consumer.committed(tp)
            if tp not in consumer.assignment():
                continue
            resumed[tp.partition] = -1 if offset is None else offset
            if offset is None:
                consumer.seek_to_beginning(tp)
            else:
                consumer.seek(tp, offset)
        self.told.rewinds.append((len(self.told.txns), resumed))

    async def _transaction(self, consumer: Any, producer: Any) -> bool:
        """One transaction; False when the producer cannot go on."""
        batches = await consumer.getmany(timeout_ms=300, max_records=20)
        records = [r for batch in batches.values() for r in batch]
        if not records:
            return True
        number = len(self.told.txns)
        txn = Txn([b"t%d:%d:%d:%s" % (number, r.partition, r.offset, r.value) for r in records], {},
                  after_rewind=len(self.told.rewinds) - 1)  # fmt: skip
        for r in records:
            txn.offsets[r.partition] = max(txn.offsets.get(r.partition, 0), r.offset + 1)
        self.told.txns.append(txn)
        abort = self.rng.random() < self.abort_ratio
        committing = False
        try:
            producer.begin_transaction()
            futures = [
                await producer.send(self.sink, out, key=r.key)
                for out, r in zip(txn.outputs, records, strict=True)
            ]
            offsets = {TopicPartition(self.topic, p): o for p, o in txn.offsets.items()}
            await producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
            if abort:
                await producer.flush()
            else:
                committing = True
                await producer.commit_transaction()
                txn.outcome = "committed"
                for out, future in zip(txn.outputs, futures, strict=True):
                    meta = await future
                    txn.reports[out] = (meta.partition, meta.offset)
                return True
        except Exception as exc:
            self._error(exc)
            if isinstance(exc, TransactionFatalError):
                txn.outcome = "unknown" if committing else "aborted"
                return False
        try:
            await producer.abort_transaction()
        except Exception as exc:
            self._error(exc)
            txn.outcome = "unknown" if committing else "aborted"
            return False
        txn.outcome = "aborted"
        await self._rewind(consumer)
        return True


def committed_offsets(bootstrap: str, topic: str, partitions: int, group: str) -> dict[int, int]:
    """The group's committed offsets (read_committed: stable ones), as it would resume."""

    async def main() -> dict[int, int]:
        with trio.fail_after(120):
            async with open_consumer(
                bootstrap_servers=bootstrap,
                group_id=group,
                isolation_level="read_committed",
                enable_auto_commit=False,
                default_api_timeout_ms=60_000,
            ) as consumer:
                out = {}
                for p in range(partitions):
                    offset = await consumer.committed(TopicPartition(topic, p))
                    out[p] = -1 if offset is None else offset
                return out

    return trio.run(main)


def check_transactions(
    report: Report,
    told: TxnTold,
    source: dict[int, list[bytes]],
    sink: dict[int, list[bytes]],
    visible: dict[int, list[bytes]],
    committed: dict[int, int],
) -> Report:
    """The rules of the module on what the processor was told (``told``), the source
    log, the sink's log (read_uncommitted) and what read_committed sees of it
    (``visible``), and the processor group's committed offsets; added to ``report``
    (the feed's, by checker.check)."""
    outcomes = [t.outcome for t in told.txns]
    report.promises += TXN_PROMISES
    seen: dict[bytes, int] = {}
    for values in visible.values():
        for value in values:
            if value:
                seen[value] = seen.get(value, 0) + 1
    report.notes.append(
        f"transactions {len(outcomes)}: committed {outcomes.count('committed')}, aborted "
        f"{outcomes.count('aborted')}, unknown {outcomes.count('unknown')}; outputs "
        f"visible {sum(seen.values())}; processor producers {told.producers}, errors "
        f"{told.errors or 'none'}"
    )
    for number, txn in enumerate(told.txns):
        shown = sum(1 for out in txn.outputs if out in seen)
        if 0 < shown < len(txn.outputs):
            report.note("partial_txn", f"t{number} ({txn.outcome}): {shown}/{len(txn.outputs)}")
        elif txn.outcome == "aborted" and shown:
            report.note("aborted_visible", f"t{number}: {shown} outputs")
        elif txn.outcome == "committed" and not shown:
            report.note("committed_invisible", f"t{number}: {len(txn.outputs)} outputs")
        for out, (partition, offset) in txn.reports.items():
            values = sink.get(partition, [])
            if offset >= 0 and (offset >= len(values) or values[offset] != out):
                report.note(
                    "txn_wrong_offset", f"t{number}: {out.decode()} at {partition}/{offset}"
                )
    outputs: dict[tuple[int, int], int] = {}
    for value, count in seen.items():
        spot = _input_of(value)
        outputs[spot] = outputs.get(spot, 0) + count
    report.notes += _went_back(told)
    for spot, count in sorted(outputs.items()):
        if count > 1:
            report.note("processed_twice", f"input {spot[0]}/{spot[1]}: {count} outputs")
            if report.counts["processed_twice"] <= 3:
                report.notes.append(_history(told, spot))
        if spot[1] >= committed.get(spot[0], -1):
            report.note("outputs_past_offsets", f"input {spot[0]}/{spot[1]}: committed "
                        f"{committed.get(spot[0], -1)}")  # fmt: skip
    for partition, values in source.items():
        for offset in range(min(committed.get(partition, -1), len(values))):
            if values[offset] and (partition, offset) not in outputs:
                report.note("offsets_without_outputs", f"input {partition}/{offset}")
    for partition, values in sink.items():
        if len(visible.get(partition, [])) < len(values):
            report.note("hanging", f"sink {partition}: LSO {len(visible.get(partition, []))} "
                        f"< high watermark {len(values)}")  # fmt: skip
    return report


def _input_of(output: bytes) -> tuple[int, int]:
    """The input (source partition, offset) an output ``t<txn>:<p>:<o>:...`` is of."""
    _, partition, offset = output.split(b":", 3)[:3]
    return int(partition), int(offset)


def _history(told: TxnTold, spot: tuple[int, int]) -> str:
    """Diagnostics of an input processed more than once: every transaction that
    took it, with its outcome, the offsets sent with it and the rewind it came
    after (the offsets the processor resumed from, and after how many
    transactions)."""
    parts = []
    for number, txn in enumerate(told.txns):
        if spot not in {_input_of(out) for out in txn.outputs}:
            continue
        where = "no rewind before it"
        if 0 <= txn.after_rewind < len(told.rewinds):
            at, resumed = told.rewinds[txn.after_rewind]
            where = f"after rewind {txn.after_rewind} (at t{at}) from {resumed}"
        parts.append(f"t{number} {txn.outcome}, sent {txn.offsets}, {where}")
    return f"input {spot[0]}/{spot[1]} taken by: " + "; ".join(parts)


def _went_back(told: TxnTold) -> list[str]:
    """Diagnostics: the rewinds that resumed a partition below the offset an
    earlier committed transaction had sent with it (KIP-447: it was committed
    with the transaction, so the group should resume from it or later)."""
    out = []
    for i, (at, resumed) in enumerate(told.rewinds):
        best: dict[int, tuple[int, int]] = {}  # partition -> (offset sent, by txn)
        for number, txn in enumerate(told.txns[:at]):
            if txn.outcome == "committed":
                for p, o in txn.offsets.items():
                    if o >= best.get(p, (-1, -1))[0]:
                        best[p] = (o, number)
        for p, offset in sorted(resumed.items()):
            if p in best and offset < best[p][0]:
                out.append(f"rewind {i} (at t{at}): partition {p} resumed from {offset}, "
                           f"below {best[p][0]} sent with committed t{best[p][1]}")  # fmt: skip
    return out
