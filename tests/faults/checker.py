"""The checker: what the clients were told (:class:`~workload.Told`) against the log read
back at the end (every partition from offset 0 to its high watermark).

Findings, each a count with a few examples:

* ``lost``: a record acknowledged (a delivery report naming an offset) that is
  nowhere in the log;
* ``wrong_offset``: a delivery report naming an offset that does not hold its record
  (a report naming none, offset -1, promises only that the record is written);
* ``duplicates``: a record in the log more than once;
* ``out_of_order``: a key's records in the log not in the order one producer sent
  them (one producer's key is one partition: the order within it is the
  partition's);
* ``consumed_gone``: a record the group consumer was given at an offset that does
  not hold it in the log (a consumer read something that was later lost);
* ``commit_backwards``: a partition's committed offset, read back after successive
  commits, that went down; or one beyond the partition's end.

Records of the ``acks=1`` producer (values ``a1...``, workload.py) are counted
apart: ``lost_acks1``, ``wrong_offset_acks1``, ``duplicates_acks1`` and
``out_of_order_acks1`` are reported and promised by nothing. Kafka's design
(https://kafka.apache.org/documentation/#design_replicatedlog and #design_ha):
only a *committed* record (one every in-sync replica has) is promised to
survive; ``acks=1`` has the leader answer once the record is in its own log,
before it is committed, and ``min.insync.replicas`` applies to ``acks=all``
only; so a leader that loses its leadership before its followers copied a
record loses it, acknowledged. A producer that is not idempotent may also write a
retried batch twice, or after a later one. What a consumer was given
(``consumed_gone``) stays a promise for them too: only committed records are
given to consumers.

And ``unavailable_s``: per fault, the longest stretch in which a partition had no acknowledgement, from
the fault's start until the next fault's start (or the workload's end).
The promises of ``acks=all`` with ``min.insync.replicas=2`` that the tests assert
are the first six being zero.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

PROMISES = ("lost", "wrong_offset", "duplicates", "out_of_order", "consumed_gone",
            "commit_backwards")  # fmt: skip
ACKS1 = tuple(f"{finding}_acks1" for finding in ("lost", "wrong_offset", "duplicates",
                                                  "out_of_order"))  # fmt: skip


@dataclasses.dataclass
class Report:
    schedule: str
    seed: int
    sent: int = 0
    acked: int = 0
    failed: int = 0
    in_log: int = 0
    counts: dict[str, int] = dataclasses.field(default_factory=dict)
    examples: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    unavailable_s: list[tuple[str, float]] = dataclasses.field(default_factory=list)
    promises: tuple[str, ...] = PROMISES
    notes: list[str] = dataclasses.field(default_factory=list)  # lines under the header
    acks1_sent: int = 0

    def note(self, finding: str, example: str) -> None:
        self.counts[finding] = self.counts.get(finding, 0) + 1
        if len(self.examples.setdefault(finding, [])) < 5:
            self.examples[finding].append(example)

    @property
    def broken(self) -> dict[str, int]:
        return {k: v for k, v in self.counts.items() if k in self.promises and v}

    def table(self) -> str:
        rows = [
            f"schedule {self.schedule} seed {self.seed}: sent {self.sent}, acknowledged "
            f"{self.acked}, failed {self.failed}, records in the log {self.in_log}",
            *(f"  {note}" for note in self.notes),
            f"  {'finding':<24} count  examples",
        ]
        for finding in self.promises:
            examples = "; ".join(self.examples.get(finding, []))
            rows.append(f"  {finding:<24} {self.counts.get(finding, 0):>5}  {examples}")
        if self.acks1_sent:
            rows.append("  not promised under acks=1:")
            for finding in ACKS1:
                examples = "; ".join(self.examples.get(finding, []))
                rows.append(f"  {finding:<24} {self.counts.get(finding, 0):>5}  {examples}")
        for fault, seconds in self.unavailable_s:
            rows.append(f"  longest write unavailability after {fault}: {seconds:.1f} s")
        return "\n".join(rows)


def seq_of(value: bytes) -> int:
    return int(value.rsplit(b":", 1)[1])


def _kind(value: bytes) -> str:
    """The suffix of a finding on ``value``: ``_acks1`` for the acks=1 producer's."""
    return "_acks1" if value.startswith(b"a1") else ""


def check(
    told: Any,
    log: dict[int, list[bytes]],
    faults: list[tuple[str, float]],
    end: float,
    schedule: str = "",
    seed: int = 0,
) -> Report:
    sent = told.sent + told.sent_librdkafka + told.sent_acks1
    report = Report(schedule, seed, sent, len(told.acked), len(told.failed))
    report.acks1_sent = told.sent_acks1
    if told.sent_acks1:
        acked1 = sum(v.startswith(b"a1") for v in told.acked)
        report.notes.append(f"of which acks=1: sent {told.sent_acks1}, acknowledged {acked1}")
    where: dict[bytes, list[tuple[int, int]]] = {}
    for partition, values in log.items():
        for offset, value in enumerate(values):
            if value:
                where.setdefault(value, []).append((partition, offset))
    report.in_log = sum(len(v) for v in where.values())
    for value, spots in where.items():
        if len(spots) > 1:
            report.note("duplicates" + _kind(value), f"{value.decode()} at {spots}")
    for value, (partition, offset) in sorted(told.acked.items()):
        if value not in where:
            report.note("lost" + _kind(value), f"{value.decode()} acked at {partition}/{offset}")
        elif offset >= 0 and (partition, offset) not in where[value]:
            report.note("wrong_offset" + _kind(value), f"{value.decode()} acked at {partition}/{offset}, "
                        f"in the log at {where[value]}")  # fmt: skip
    for partition, values in log.items():
        last: dict[bytes, int] = {}
        for offset, value in enumerate(values):
            if not value:
                continue
            key, seq = value.rsplit(b":", 1)[0], seq_of(value)
            if seq < last.get(key, -1):
                report.note(
                    "out_of_order" + _kind(value), f"{value.decode()} at {partition}/{offset}"
                )
            last[key] = max(seq, last.get(key, -1))
    for partition, offset, value in told.consumed:
        values = log.get(partition, [])
        if offset >= len(values) or values[offset] != value:
            report.note("consumed_gone", f"{value.decode()} read at {partition}/{offset}")
    highest: dict[int, int] = {}
    for _, partition, offset in told.committed:
        if offset < highest.get(partition, -1):
            report.note("commit_backwards", f"{partition}: {highest[partition]} -> {offset}")
        highest[partition] = max(offset, highest.get(partition, -1))
    for partition, offset in highest.items():
        if offset > len(log.get(partition, [])):
            report.note("commit_backwards", f"{partition}: committed {offset} past the end "
                        f"{len(log.get(partition, []))}")  # fmt: skip
    starts = [t for _, t in faults] + [end]
    acks = sorted(told.ack_times)
    for (name, start), stop in zip(faults, starts[1:], strict=True):
        gap = 0.0
        for partition in log:
            points = [start, *(t for t, p in acks if p == partition and start <= t <= stop), stop]
            gap = max(gap, *(b - a for a, b in itertools.pairwise(points)))
        report.unavailable_s.append((name, gap))
    return report
