"""Throughput the console samples itself (console/throughput.py): the rates
between two samples, what makes a figure unknown, the bounds of the history,
the charts' gaps; then the samples of a real brokerlite taken on a clock the
test moves, and the pages that show them."""

from __future__ import annotations

import re
from typing import Any

import pytest
from console_helpers import FakeClock, cells, consoles_in_thread, consume_and_commit, get, produce

from trafka.console import throughput
from trafka.console.throughput import Snapshot, ThroughputHistory, interval_rates, rate_chart
from trafka.sdk import NewTopic
from trafka.sdk.fetcher import TopicPartition

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def snap(
    at: float,
    ends: dict[TopicPartition, int],
    *,
    leaders: dict[TopicPartition, int | None] | None = None,
    sizes: dict[TopicPartition, int] | None = None,
    committed: dict[str, dict[TopicPartition, int]] | None = None,
) -> Snapshot:
    if leaders is None:
        leaders = {A0: 1, A1: 2, B0: 1}
    return Snapshot(
        at,
        leaders,
        ends,
        sizes if sizes is not None else {tp: 100 * e for tp, e in ends.items()},
        committed if committed is not None else {},
    )


def test_rates_are_growth_over_the_seconds_between_two_samples() -> None:
    before = snap(100.0, {A0: 10, A1: 0, B0: 5}, committed={"g": {A0: 4}})
    after = snap(110.0, {A0: 60, A1: 30, B0: 5}, committed={"g": {A0: 24}})
    rates = interval_rates(before, after)
    assert rates[("topic", "a", "messages_in")] == (50 + 30) / 10
    assert rates[("topic", "a", "bytes_in")] == (5000 + 3000) / 10
    assert rates[("topic", "a", "messages_out")] == 20 / 10
    assert rates[("topic", "b", "messages_in")] == 0.0  # a known zero: nothing came
    # By leader: broker 1 leads a-0 and b-0, broker 2 leads a-1.
    assert rates[("broker", 1, "messages_in")] == 50 / 10
    assert rates[("broker", 2, "messages_in")] == 30 / 10
    assert rates[("broker", 1, "messages_out")] == 20 / 10


def test_a_partition_without_a_leader_is_a_gap_not_a_zero() -> None:
    before = snap(0.0, {A0: 10, A1: 10, B0: 0})
    # a-1 lost its leader: ListOffsets cannot answer for it, so no end offset.
    after = snap(10.0, {A0: 20, B0: 7}, leaders={A0: 1, A1: None, B0: 1})
    rates = interval_rates(before, after)
    assert rates[("topic", "a", "messages_in")] is None
    assert rates[("topic", "a", "bytes_in")] is None
    assert rates[("broker", 2, "messages_in")] is None  # it led a-1 before
    assert rates[("topic", "b", "messages_in")] == 0.7
    assert rates[("broker", 1, "messages_in")] == (10 + 7) / 10


def test_a_leader_change_makes_both_brokers_unknown_but_not_the_topic() -> None:
    before = snap(0.0, {A0: 0, A1: 0, B0: 0})
    after = snap(5.0, {A0: 10, A1: 5, B0: 0}, leaders={A0: 2, A1: 2, B0: 1})
    rates = interval_rates(before, after)
    assert rates[("broker", 1, "messages_in")] is None
    assert rates[("broker", 2, "messages_in")] is None
    assert rates[("topic", "a", "messages_in")] == 3.0


def test_what_went_down_or_appeared_is_unknown() -> None:
    # Retention deleted a segment of a-0 (its size went down): bytes unknown,
    # messages still known. A group that started meanwhile: consumed unknown.
    before = snap(0.0, {A0: 10, A1: 0, B0: 0}, sizes={A0: 9000, A1: 0, B0: 0})
    after = snap(
        10.0,
        {A0: 20, A1: 0, B0: 0},
        sizes={A0: 1000, A1: 0, B0: 0},
        committed={"new": {A0: 20}},
    )
    rates = interval_rates(before, after)
    assert rates[("topic", "a", "bytes_in")] is None
    assert rates[("topic", "a", "messages_in")] == 1.0
    assert rates[("topic", "a", "messages_out")] is None
    assert rates[("topic", "b", "messages_out")] == 0.0
    # A partition added between the samples: its topic's figure is unknown.
    grown = snap(
        20.0, {A0: 20, A1: 0, B0: 0}, leaders={A0: 1, A1: 2, B0: 1, TopicPartition("b", 1): 1}
    )
    assert interval_rates(after, grown)[("topic", "b", "messages_in")] is None
    # Unread groups' offsets or log dirs: unknown, not zero.
    blind = Snapshot(30.0, grown.leaders, grown.ends, None, None)
    rates = interval_rates(grown, blind)
    assert rates[("topic", "a", "bytes_in")] is None
    assert rates[("topic", "a", "messages_out")] is None
    assert rates[("topic", "a", "messages_in")] == 0.0
    # A clock that did not move (or went back) gives no rate at all.
    assert set(interval_rates(blind, blind).values()) == {None}


def test_the_history_needs_two_samples_and_keeps_a_bounded_number() -> None:
    history = ThroughputHistory(keep=3)
    history.record(snap(0.0, {A0: 0, A1: 0, B0: 0}))
    assert history.points(("topic", "a", "messages_in")) == []
    assert throughput.topic_charts(history, "a") == []
    for i in range(1, 11):
        history.record(snap(10.0 * i, {A0: 5 * i, A1: 0, B0: 0}))
    points = history.points(("topic", "a", "messages_in"))
    assert points == [(80.0, 0.5), (90.0, 0.5), (100.0, 0.5)]
    assert history.samples == 11
    # Series over the bound: brokers first, then topics in name order.
    small = ThroughputHistory(max_series=7)
    small.record(snap(0.0, {A0: 0, A1: 0, B0: 0}))
    small.record(snap(1.0, {A0: 0, A1: 0, B0: 0}))
    assert small.dropped == (2 + 2) * 3 - 7  # two brokers and two topics, three metrics each
    assert small.points(("topic", "b", "messages_in")) == []
    assert small.points(("broker", 2, "bytes_in")) != []


def test_a_chart_breaks_its_line_at_unknown_rates() -> None:
    points: list[tuple[float, float | None]] = [
        (0.0, 1.0),
        (10.0, 2.0),
        (20.0, None),
        (30.0, 4.0),
        (40.0, None),
        (50.0, 3.0),
        (60.0, 3.5),
    ]
    chart = rate_chart("t", "msg/s", [("in", points)])
    assert chart is not None
    (line,) = chart.lines
    assert [len(s.split()) for s in line.segments] == [2, 1, 2]
    assert chart.unknown == 2
    assert line.last == 3.5
    assert rate_chart("t", "msg/s", [("in", [])]) is None


def _rate_cells(page_text: str) -> dict[str, list[str]]:
    return {row[0]: row[1:] for row in cells(page_text, "rates")}


def test_samples_of_a_real_broker_on_a_moved_clock(site: Any) -> None:
    """brokerlite in-process; the console's clock is the test's, so the rate is
    the records produced over the seconds the test says passed."""
    create_topics_of(site, "rated")
    produce(site, "rated", [(None, b"x" * 50, p % 2) for p in range(10)])
    consume_and_commit(site, "rated-readers", "rated", 10)
    clock = FakeClock()
    with consoles_in_thread({"here": site.bootstrap}, clock) as served:
        first = served.sample("here")
        topic = get(served.site, "/topics/rated")
        assert topic.status == 200 and 'id="rates-empty"' in topic.text
        produce(site, "rated", [(None, b"y" * 70, p % 2) for p in range(30)])
        consume_and_commit(site, "rated-readers", "rated", 30)
        clock.now += 10.0
        second = served.sample("here")
        tps = [TopicPartition("rated", 0), TopicPartition("rated", 1)]
        assert sum(second.ends[tp] - first.ends[tp] for tp in tps) == 30
        grown = sum(second.sizes[tp] - first.sizes[tp] for tp in tps)
        assert grown > 30 * 70  # the records and their batches' headers
        topic = get(served.site, "/topics/rated")
        assert topic.status == 200
        row = _rate_cells(topic.text)["rated"]
        assert row == ["3.0", "3.0", f"{grown / 10:,.1f}"]
        assert re.search(r'<polyline class="rate-line"|<circle class="rate-line"', topic.text)
        # A group that started since: how much it read in between is not
        # known, and the page says so rather than a number.
        consume_and_commit(site, "late-readers", "rated", 5)
        clock.now += 10.0
        served.sample("here")
        row = _rate_cells(get(served.site, "/topics/rated").text)["rated"]
        assert row[:2] == ["0.0", "unknown"]
        # A group's page records a lag sample, at the console's clock too.
        assert get(served.site, "/groups/rated-readers").status == 200
        [lagged] = served.consoles["here"].history.samples("rated-readers")
        assert lagged.at == clock.now
        brokers = get(served.site, "/")
        (leader,) = {n for n in second.leaders.values()}
        # (Its messages in may count the group's commits, where the broker
        # keeps them in __consumer_offsets.)
        assert _rate_cells(brokers.text)[f"broker {leader}"][1] == "unknown"


def create_topics_of(site: Any, name: str) -> None:
    from console_helpers import create_topics

    create_topics(site, NewTopic(name, 2, 1))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from console_helpers import Site

    from trafka.brokerlite.server import broker_in_thread

    with broker_in_thread(
        data_dir=tmp_path_factory.mktemp("rates-broker"),
        port=0,
        group_initial_rebalance_delay_ms=0,
    ) as running:
        yield Site("", running.bootstrap_servers)
