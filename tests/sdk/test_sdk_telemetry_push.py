"""MetricsPush, what each client holds of its KIP-714 push, without sockets:
the resource it makes, what a push measures, and its calls with push on and off."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from trafka.sdk.config import AdminConfig, ConsumerConfig, ProducerConfig
from trafka.sdk.errors import UsageError
from trafka.sdk.telemetry import IntervalAverages, MetricSample, MetricsPush, Peaks

pytestmark = pytest.mark.anyio


class Cluster:
    """What the push reads of a client's cluster: its peaks, taken."""

    def __init__(self) -> None:
        self.taken = 0

    def take_peaks(self) -> dict[int, tuple[dict[int, float], int]]:
        self.taken += 1
        return {0: ({1: float(self.taken)}, 0)}


class Measured:
    """A client's ``measure``, recording what it was given."""

    def __init__(self) -> None:
        self.calls: list[tuple[IntervalAverages, Any, Peaks, float]] = []

    def __call__(
        self, averages: IntervalAverages, stats: Any, peaks: Peaks, now: float
    ) -> list[MetricSample]:
        self.calls.append((averages, stats, peaks, now))
        return [MetricSample("org.apache.kafka.consumer.x", "gauge", len(self.calls))]


async def test_the_resource_leaves_out_unset_attributes_and_adds_the_rack() -> None:
    config = ConsumerConfig(client_rack="rack-1")
    resource = {"group_id": "g", "group_instance_id": None}
    push = MetricsPush(config, Cluster(), "consumer", resource, dict, Measured())
    assert push.resource == {"group_id": "g", "client_rack": "rack-1"}
    # The attributes the pushes carry are the machine's own, changed in place.
    assert push.driver is not None
    push.resource["group_member_id"] = "m-1"
    assert push.driver.telemetry.resource["group_member_id"] == "m-1"


async def test_a_push_measures_the_clients_statistics_and_peaks_now() -> None:
    cluster, measured = Cluster(), Measured()
    snapshots = iter(["first", "second"])
    push = MetricsPush(ProducerConfig(), cluster, "producer", {}, lambda: next(snapshots), measured)
    before = anyio.current_time()
    assert push.samples()[0].value == 1
    assert push.samples()[0].value == 2
    (averages1, stats1, peaks1, now1), (averages2, stats2, peaks2, now2) = measured.calls
    assert (stats1, stats2) == ("first", "second")
    assert (peaks1, peaks2) == ({0: ({1: 1.0}, 0)}, {0: ({1: 2.0}, 0)})  # taken once a push
    assert averages1 is averages2  # one client's averages, push after push
    assert before <= now1 <= now2 <= anyio.current_time()  # the loop's clock


async def test_another_client_has_averages_of_its_own() -> None:
    first, second = Measured(), Measured()
    MetricsPush(ProducerConfig(), Cluster(), "producer", {}, dict, first).samples()
    MetricsPush(ProducerConfig(), Cluster(), "producer", {}, dict, second).samples()
    assert first.calls[0][0] is not second.calls[0][0]


async def test_with_push_off_every_call_still_answers() -> None:
    measured = Measured()
    config = AdminConfig()  # the admin client's default: off
    push = MetricsPush(config, Cluster(), "admin", {"a": "b"}, dict, measured)
    assert push.driver is None
    assert push.statistics() is None
    assert push.resource == {}
    async with anyio.create_task_group() as tg:
        push.start(tg)  # no task: the block ends at once
    await push.close()
    with pytest.raises(ValueError, match="timeout_ms"):
        await push.instance_id(-1)  # the argument is checked first
    with pytest.raises(UsageError, match=r"set enable\.metrics\.push to true"):
        await push.instance_id(0)
    assert measured.calls == []


async def test_with_push_on_and_no_subscription_yet() -> None:
    push = MetricsPush(ConsumerConfig(), Cluster(), "consumer", {}, dict, Measured())
    stats = push.statistics()
    assert stats is not None and stats.state == "subscription needed" and stats.enabled
    assert await push.instance_id(0) is None


async def test_close_is_shielded_from_a_cancellation_around_it() -> None:
    push = MetricsPush(ConsumerConfig(), Cluster(), "consumer", {}, dict, Measured())
    with anyio.CancelScope() as scope:
        scope.cancel()
        await push.close()  # nothing was subscribed: no push, the machine ends
    stats = push.statistics()
    assert stats is not None and stats.state == "terminated"
