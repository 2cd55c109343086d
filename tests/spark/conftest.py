"""A local Spark (2 cores) and a brokerlite, shared by the Spark data source's tests."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from trafka.brokerlite import RunningBroker
from trafka.brokerlite.server import broker_in_thread


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
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    data = tmp_path_factory.mktemp("spark-broker")
    with broker_in_thread(
        port=0, host="127.0.0.1", data_dir=data, group_initial_rebalance_delay_ms=0
    ) as running:
        yield running
