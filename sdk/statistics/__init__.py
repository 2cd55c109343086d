"""Client statistics: the snapshots users read, and the counters they are made from.

Every client has ``statistics()``: a snapshot of what it counted, as frozen
dataclasses. The package holds, by concern:

* :mod:`.counters`: the counting, by the I/O-free layers and the drivers
  (where counters live, which totals only grow, how throttling is counted, how
  brokers are keyed, the 30 s windows of the rates and averages);
* :mod:`.brokers`: what every client reports (per broker, the metrics push),
  and the admin client's snapshot, which is only that;
* :mod:`.producing` and :mod:`.consuming`: the producer's, the consumer's and
  the share consumer's snapshots.

Rules:

* A snapshot (:meth:`Producer.statistics` and the like) is a tree of frozen
  dataclasses copied at the moment of the call: it never changes afterwards and
  shares nothing with the client.
* Building a snapshot reads the counters at ``now``, the driver's clock, given
  by the caller: nothing here reads a clock.
* Every name is importable from here, as from the single module this was. The
  counters are loaded with it (every client counts); a snapshot's module is
  loaded when one of its names is first used (PEP 562): defining the snapshot
  dataclasses was a tenth of ``import trafka.sdk`` (issue #48), and most
  programs never ask for most of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trafka.common.lazy import lazy_exports

from .counters import WINDOW_S as WINDOW_S
from .counters import WINDOW_SAMPLES as WINDOW_SAMPLES
from .counters import CoordinatorCounters as CoordinatorCounters
from .counters import Interval as Interval
from .counters import NodeCounters as NodeCounters
from .counters import PartitionCounters as PartitionCounters
from .counters import TopicCounters as TopicCounters
from .counters import Windowed as Windowed
from .counters import WindowView as WindowView
from .counters import error_name as error_name
from .counters import topic_totals as topic_totals

if TYPE_CHECKING:
    from .brokers import (
        AdminStatistics,
        ApiStatistics,
        BrokerStatistics,
        NodeWindowStatistics,
        TelemetryStatistics,
        ThrottleStatistics,
    )
    from .brokers import broker_statistics as broker_statistics
    from .brokers import node_window_statistics as node_window_statistics
    from .consuming import (
        ConsumerStatistics,
        CoordinatorStatistics,
        FetchSessionStatistics,
        GroupStatistics,
        PartitionStatistics,
        ShareConsumerStatistics,
    )
    from .consuming import coordinator_statistics as coordinator_statistics
    from .producing import (
        ProducerPartitionStatistics,
        ProducerStatistics,
        TopicStatistics,
    )
    from .producing import producer_partition_statistics as producer_partition_statistics
    from .producing import topic_statistics as topic_statistics

_LAZY = {
    "AdminStatistics": ".brokers",
    "ApiStatistics": ".brokers",
    "BrokerStatistics": ".brokers",
    "NodeWindowStatistics": ".brokers",
    "TelemetryStatistics": ".brokers",
    "ThrottleEvent": ".brokers",
    "ThrottleStatistics": ".brokers",
    "broker_statistics": ".brokers",
    "node_window_statistics": ".brokers",
    "ProducerPartitionStatistics": ".producing",
    "ProducerStatistics": ".producing",
    "TopicStatistics": ".producing",
    "producer_partition_statistics": ".producing",
    "topic_statistics": ".producing",
    "ConsumerStatistics": ".consuming",
    "CoordinatorStatistics": ".consuming",
    "FetchSessionStatistics": ".consuming",
    "GroupStatistics": ".consuming",
    "PartitionStatistics": ".consuming",
    "ShareConsumerStatistics": ".consuming",
    "coordinator_statistics": ".consuming",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)


__all__ = [
    "ApiStatistics",
    "CoordinatorCounters",
    "CoordinatorStatistics",
    "NodeWindowStatistics",
    "Windowed",
    "BrokerStatistics",
    "ConsumerStatistics",
    "FetchSessionStatistics",
    "GroupStatistics",
    "NodeCounters",
    "PartitionCounters",
    "PartitionStatistics",
    "ProducerPartitionStatistics",
    "ProducerStatistics",
    "ShareConsumerStatistics",
    "TelemetryStatistics",
    "ThrottleEvent",
    "ThrottleStatistics",
    "TopicCounters",
    "TopicStatistics",
    "AdminStatistics",
]
