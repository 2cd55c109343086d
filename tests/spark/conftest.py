"""A local Spark (2 cores) and a brokerlite, shared by the Spark data source's tests."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import released_peers
from kafka_peers import SKIP_ENV, SPARK_KAFKA, jars, missing
from spark_helpers import TEST_JVM_OPTIONS

from trafka.brokerlite import RunningBroker
from trafka.brokerlite.server import broker_in_thread

#: The jars of Spark's own Kafka connector that its ``format("kafka")`` needs;
#: the connector's other dependencies (Hadoop's client, Scala, snappy, lz4...)
#: are pyspark's own, in other versions.
CONNECTOR_JARS = (
    "spark-sql-kafka-0-10_",
    "spark-token-provider-kafka-0-10_",
    "kafka-clients-",
    "commons-pool2-",
)


def connector_jars() -> list[str]:
    """Spark's own Kafka connector (``format("kafka")``, for the parity tests of
    test_spark_kafka_parity.py), when it was fetched (tests/kafka_peers.py);
    none with the Kafka tests skipped."""
    if os.environ.get(SKIP_ENV) == "1" or missing("spark-kafka", SPARK_KAFKA) is not None:
        return []
    return [str(j) for j in jars("spark-kafka", SPARK_KAFKA) if j.name.startswith(CONNECTOR_JARS)]


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    # Spark's Python workers must run this interpreter (and see trafka).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise RuntimeError(
            "Spark needs a Java runtime (17 or newer): apt-get install default-jre-headless"
        )
    from pyspark.sql import SparkSession

    from trafka.spark import register

    # A session some earlier code left would run its workers with another interpreter.
    stale = SparkSession.getActiveSession()
    if stale is not None:
        stale.stop()
    session = (
        SparkSession.builder.master("local[2]")
        .appName("trafka-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.extraJavaOptions", TEST_JVM_OPTIONS)
        # Spark's own connector beside trafka's, in the same session (the parity tests).
        .config("spark.jars", ",".join(connector_jars()))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    released_peers.hold("spark", session.stop)  # CONFINED's (tests/conftest.py)
    yield session
    released_peers.drop("spark")
    session.stop()


@pytest.fixture(autouse=True)
def _active_session(request: pytest.FixtureRequest) -> None:
    """Make the test's Spark session the active one of this thread's JVM side.

    Spark keeps the active session per JVM thread, and py4j gives each Python
    thread a JVM thread of its own; after some runs (threads making py4j calls,
    the suite's xdist workers) the thread a test runs on no longer saw it, and a
    write failed to find the data source (Spark looks Python data sources up in
    the active session). Only for tests that use Spark.
    """
    if "spark" in request.fixturenames:
        session = request.getfixturevalue("spark")
        session._jvm.org.apache.spark.sql.SparkSession.setActiveSession(session._jsparkSession)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    data = tmp_path_factory.mktemp("spark-broker")
    with broker_in_thread(
        port=0, host="127.0.0.1", data_dir=data, group_initial_rebalance_delay_ms=0
    ) as running:
        yield running


@pytest.fixture
def accepted(broker: RunningBroker) -> Iterator[Callable[[], int]]:
    """How many connections the broker has accepted so far."""
    core = broker.broker
    count = 0
    original = core.connection_opened

    def counting(*args: Any, **kwargs: Any) -> None:
        nonlocal count
        count += 1
        original(*args, **kwargs)

    core.connection_opened = counting  # type: ignore[method-assign]
    try:
        yield lambda: count
    finally:
        core.connection_opened = original  # type: ignore[method-assign]
