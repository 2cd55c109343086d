"""Client metrics push (KIP-714), in four modules:

* :mod:`.state`: :class:`ClientTelemetry`, the I/O-free subscription/push state
  machine (its states, timing, errors, compression and OTLP payloads);
* :mod:`.metrics`: what each client measures (:class:`MetricSample` and the
  producer's, consumer's, share consumer's and admin client's samples);
* :mod:`.driver`: :class:`TelemetryDriver`, the task that runs the machine over
  a client's cluster;
* :mod:`.push`: :class:`MetricsPush`, what each client holds: it makes the
  task, starts it, closes it with the terminating push and answers the
  client's calls (statistics, the client instance id).

Every name is importable from here, as it was when this was one module, but
``client_telemetry`` and ``instance_id``, which :class:`MetricsPush` replaced.
"""

from .driver import TelemetryDriver, disabled_error
from .metrics import (
    ADMIN_PREFIX,
    CONSUMER_PREFIX,
    PRODUCER_PREFIX,
    SHARE_CONSUMER_PREFIX,
    IntervalAverages,
    MetricSample,
    PollTimes,
    admin_samples,
    consumer_samples,
    label_group_member,
    producer_samples,
    share_consumer_samples,
)
from .push import MetricsPush, Peaks
from .state import (
    DEFAULT_PUSH_INTERVAL,
    TRANSITIONS,
    ClientTelemetry,
    Subscription,
    TelemetryState,
)

__all__ = [
    "ADMIN_PREFIX",
    "CONSUMER_PREFIX",
    "DEFAULT_PUSH_INTERVAL",
    "PRODUCER_PREFIX",
    "SHARE_CONSUMER_PREFIX",
    "TRANSITIONS",
    "ClientTelemetry",
    "IntervalAverages",
    "MetricSample",
    "MetricsPush",
    "Peaks",
    "PollTimes",
    "Subscription",
    "TelemetryDriver",
    "TelemetryState",
    "admin_samples",
    "consumer_samples",
    "label_group_member",
    "disabled_error",
    "producer_samples",
    "share_consumer_samples",
]
