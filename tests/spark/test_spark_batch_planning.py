"""A batch read's planning clients, kept between queries (:data:`PLANNERS`),
against real brokerlites: the queries of one process reuse their connections,
yet each query plans from what the cluster holds when it runs (a topic created,
grown or deleted before it is seen, as Spark's connector asks its admin client
again for every query), and reads with other cluster or client settings never
share a client.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from spark_helpers import create, delete, fresh, grow, produce

from trafka.brokerlite import RunningBroker
from trafka.brokerlite.server import broker_in_thread
from trafka.spark import _kafka
from trafka.spark.options import parse_read_options

pytestmark = pytest.mark.timeout(120)


def _options(broker: RunningBroker, **options: str) -> Any:
    return parse_read_options(
        {
            "kafka.bootstrap.servers": broker.bootstrap_servers,
            # Bounds every lookup of these tests (no test waits longer for a broker).
            "kafka.default.api.timeout.ms": "10000",
            "kafka.request.timeout.ms": "10000",
            "fetchOffset.numRetries": "0",
            **options,
        },
        streaming=False,
    )


def test_queries_reuse_their_connections_and_see_every_change_of_the_topics(
    broker: RunningBroker, accepted: Callable[[], int]
) -> None:
    topic = fresh("batch-plan")
    create(broker, topic, 2)
    produce(broker, topic, [(None, b"a", None)] * 4)
    opts = _options(broker, subscribe=topic)
    start, end = _kafka.batch_offsets(opts)
    assert start == {topic: {"0": 0, "1": 0}}
    assert sum(end[topic].values()) == 4
    # The connections the queries after the first open (the helpers' own not counted).
    opened = 0

    def plan() -> tuple[_kafka.Offsets, _kafka.Offsets]:
        nonlocal opened
        before = accepted()
        try:
            return _kafka.batch_offsets(opts)
        finally:
            opened += accepted() - before

    # Records written since the last query are in the next one's range.
    produce(broker, topic, [(None, b"b", None)] * 2)
    assert sum(plan()[1][topic].values()) == 6

    # A partition added between two queries is planned by the second, from its start.
    grow(broker, topic, 3)
    start, end = plan()
    assert start == {topic: {"0": 0, "1": 0, "2": 0}}
    assert end[topic]["2"] == 0 and sum(end[topic].values()) == 6

    # A topic deleted between two queries fails the second, as a missing topic does.
    delete(broker, topic)
    with pytest.raises(_kafka.PlanningError, match=f"topics do not exist: {topic}"):
        plan()

    # Created again with one partition: the next query plans that one partition.
    create(broker, topic, 1)
    produce(broker, topic, [(None, b"d", None)])
    assert plan() == ({topic: {"0": 0}}, {topic: {"0": 1}})
    # All of it over the connections the first query opened.
    assert opened == 0


def test_a_pattern_sees_a_topic_created_between_two_queries(broker: RunningBroker) -> None:
    prefix = fresh("batch-pattern")
    create(broker, f"{prefix}-a", 1)
    opts = _options(broker, subscribePattern=f"{prefix}-.*")
    assert set(_kafka.batch_offsets(opts)[0]) == {f"{prefix}-a"}
    create(broker, f"{prefix}-b", 2)
    assert _kafka.batch_offsets(opts)[0] == {
        f"{prefix}-a": {"0": 0},
        f"{prefix}-b": {"0": 0, "1": 0},
    }


def test_reads_of_another_cluster_or_with_other_settings_get_their_own_clients(
    broker: RunningBroker, tmp_path: Path
) -> None:
    topic = fresh("batch-other")
    create(broker, topic, 1)
    with broker_in_thread(port=0, host="127.0.0.1", data_dir=tmp_path) as other:
        here = _options(broker, subscribe=topic)
        _kafka.batch_offsets(here)
        opened = _kafka.PLANNERS.opened
        # The same read of another cluster: that cluster has no such topic.
        with pytest.raises(_kafka.PlanningError, match=f"topics do not exist: {topic}"):
            _kafka.batch_offsets(_options(other, subscribe=topic))
        assert _kafka.PLANNERS.opened == opened + 1
    # Another client id is another client; another group id is not (each query
    # draws one of its own).
    _kafka.batch_offsets(_options(broker, subscribe=topic, **{"kafka.client.id": "other"}))
    assert _kafka.PLANNERS.opened == opened + 2
    _kafka.batch_offsets(_options(broker, subscribe=topic, groupIdPrefix="another"))
    assert _kafka.PLANNERS.opened == opened + 2


def test_a_failed_lookup_closes_the_clients_it_used(broker: RunningBroker, tmp_path: Path) -> None:
    with broker_in_thread(port=0, host="127.0.0.1", data_dir=tmp_path) as gone:
        topic = fresh("batch-fail")
        create(gone, topic, 1)
        opts = _options(gone, subscribe=topic, **{"kafka.default.api.timeout.ms": "2000"})
        _kafka.batch_offsets(opts)
    kept = len(_kafka.PLANNERS)
    # The broker stopped: the kept clients fail, and are closed, not given back.
    with pytest.raises(_kafka.TrafkaError):
        _kafka.batch_offsets(opts)
    assert len(_kafka.PLANNERS) == kept - 1


@pytest.mark.slow
def test_one_sessions_queries_see_the_topic_change_between_them(
    spark: Any, broker: RunningBroker
) -> None:
    topic = fresh("batch-session")
    create(broker, topic, 1)
    produce(broker, topic, [(None, b"a", None)] * 2)

    def count() -> int:
        df = (
            spark.read.format("trafka")
            .option("kafka.bootstrap.servers", broker.bootstrap_servers)
            .option("kafka.default.api.timeout.ms", "10000")
            .option("subscribe", topic)
            .load()
        )
        return int(df.count())

    assert count() == 2
    grow(broker, topic, 2)
    produce(broker, topic, [(b"k", b"b", None)] * 3)
    assert count() == 5
    delete(broker, topic)
    with pytest.raises(Exception, match=f"topics do not exist: {topic}"):
        count()
    create(broker, topic, 1)
    produce(broker, topic, [(None, b"c", None)])
    assert count() == 1
