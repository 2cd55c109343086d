"""The transactional checker's rules and diagnostics on what a processor was told,
without a cluster (txn_workload.check_transactions).

The case is the one of the leader-zk finding (seed 64): a committed transaction
whose offsets the group never got, then an abort, after which the processor
resumed from the group's older offsets and processed the same inputs again in
a committed transaction. The rules count it as ``processed_twice`` and nothing
else; the diagnostics name the rewind that went back below the offsets a
committed transaction had sent, and the transactions that took each input.
"""

from __future__ import annotations

from checker import Report
from txn_workload import Txn, TxnTold, check_transactions


def outputs(number: int, partition: int, offsets: range) -> list[bytes]:
    return [b"t%d:%d:%d:v%d" % (number, partition, o, o) for o in offsets]


def sink_of(*txns: Txn) -> tuple[dict[int, list[bytes]], dict[int, list[bytes]]]:
    """Sink partition 0 as read back (each transaction's outputs, then its marker,
    an empty value) under read_uncommitted and under read_committed (an aborted
    one's outputs empty too), as workload.read_log gives them."""
    sink: list[bytes] = []
    visible: list[bytes] = []
    for txn in txns:
        sink += [*txn.outputs, b""]
        shown = txn.outcome == "committed"
        visible += [*(out if shown else b"" for out in txn.outputs), b""]
    return {0: sink}, {0: visible}


def test_a_rewind_below_a_committed_transaction_is_named_and_counted_once() -> None:
    told = TxnTold()
    told.rewinds.append((0, {0: -1}))  # the first assignment: nothing committed
    t0 = Txn(outputs(0, 0, range(0, 2)), {0: 2}, "committed", after_rewind=0)
    t1 = Txn(outputs(1, 0, range(2, 4)), {0: 4}, "committed", after_rewind=0)  # offsets lost
    t2 = Txn(outputs(2, 0, range(4, 5)), {0: 5}, "aborted", after_rewind=0)
    told.rewinds.append((3, {0: 2}))  # after the abort: back to t0's offsets
    t3 = Txn(outputs(3, 0, range(2, 5)), {0: 5}, "committed", after_rewind=1)
    told.txns = [t0, t1, t2, t3]
    source = {0: [b"v%d" % o for o in range(5)]}
    sink, visible = sink_of(*told.txns)
    report = check_transactions(Report("leader-zk", 64), told, source, sink, visible, {0: 5})
    assert report.broken == {"processed_twice": 2}, report.table()
    assert report.examples["processed_twice"] == ["input 0/2: 2 outputs", "input 0/3: 2 outputs"]
    assert "rewind 1 (at t3): partition 0 resumed from 2, below 4 sent with committed t1" in (
        report.notes
    )
    assert (
        "input 0/2 taken by: t1 committed, sent {0: 4}, after rewind 0 (at t0) from {0: -1}; "
        "t3 committed, sent {0: 5}, after rewind 1 (at t3) from {0: 2}"
    ) in report.notes


def test_a_rewind_to_the_last_committed_offsets_is_no_finding() -> None:
    told = TxnTold()
    told.rewinds.append((0, {0: -1}))
    t0 = Txn(outputs(0, 0, range(0, 2)), {0: 2}, "committed", after_rewind=0)
    t1 = Txn(outputs(1, 0, range(2, 4)), {0: 4}, "aborted", after_rewind=0)
    told.rewinds.append((2, {0: 2}))
    t2 = Txn(outputs(2, 0, range(2, 4)), {0: 4}, "committed", after_rewind=1)
    told.txns = [t0, t1, t2]
    source = {0: [b"v%d" % o for o in range(4)]}
    sink, visible = sink_of(*told.txns)
    report = check_transactions(Report("leader-zk", 64), told, source, sink, visible, {0: 4})
    assert report.broken == {}, report.table()
    assert not [n for n in report.notes if n.startswith(("rewind", "input"))], report.notes
