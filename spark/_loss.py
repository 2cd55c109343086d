"""What a stream's micro-batch finds gone as it is planned, reported as Spark's
Kafka source reports it.

Spark's connector checks three things when it plans a micro-batch's offset
ranges (``getOffsetRangesFromResolvedOffsets``), on the driver, before any
task runs; a task that then finds records of its range deleted is
:func:`trafka.spark._kafka.read_range`'s business:

* a partition the micro-batch's start does not know (added to a topic, or of a
  topic that started matching the pattern) begins at its earliest offset, and
  that offset is not 0: its first records were deleted before the stream saw
  them;
* a partition the start knows is not in the end any more (its topic deleted,
  or no longer matching the pattern);
* a partition's end is before its start (the topic deleted and created again,
  or truncated): :func:`trafka.spark._kafka.plan_ranges` checks that one.

With ``failOnDataLoss=true`` (the default) each fails the micro-batch, and so
the query, with :class:`~trafka.spark._kafka.DataLossError`; with ``false`` it
is logged and the stream goes on: a new partition from its earliest offset, a
gone one dropped, a shrunk one from its new end on.
"""

from __future__ import annotations

import logging

from . import _kafka
from ._kafka import DataLossError, Offsets, Planner, _from_offsets
from .options import ReadOptions

__all__ = ["stream_start"]

_log = logging.getLogger(__name__)


def stream_start(
    opts: ReadOptions, start: Offsets, end: Offsets, planner: Planner | None = None
) -> Offsets:
    """The offsets a micro-batch from ``start`` to ``end`` reads from: ``start``
    plus the earliest offsets of the partitions it does not know.

    Raises:
        DataLossError: with ``failOnDataLoss=true``, a new partition does not
            begin at offset 0, or a partition of ``start`` is not in ``end``.
    """
    begin = _kafka.new_partitions(opts, start, end, planner)
    known, until = _from_offsets(start), _from_offsets(end)
    lost = [
        f"{tp.topic}-{tp.partition}, new since the last micro-batch, starts at offset {first}, "
        f"not 0: offsets 0-{first - 1} were deleted before the stream read them"
        for tp, first in sorted(_from_offsets(begin).items())
        if tp not in known and first != 0
    ]
    gone = sorted(f"{tp.topic}-{tp.partition}" for tp in known if tp not in until)
    if gone:
        lost.append(
            f"{', '.join(gone)} no longer exist (deleted, or no longer matching the pattern): "
            "any records of them not yet read are lost"
        )
    for what in lost:
        if opts.fail_on_data_loss:
            raise DataLossError(f"{what}; set failOnDataLoss=false to go on")
        _log.warning("%s (failOnDataLoss=false: the stream goes on)", what)
    return begin
