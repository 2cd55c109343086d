"""The tests' Spark JVMs map Spark's class-data archive (tests/spark_home.py).

A JVM that refuses an archive (another class path, changed jars, another JDK)
says nothing (its cds logging is off) and loads its classes from the jars as
before: about twice the CPU of each Spark start-up. Only the JVM's memory map
shows whether it took the archive, so that is what is checked, on the tests'
shared session.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import spark_home
from kafka_peers import SKIP_ENV


def test_the_sessions_jvm_maps_the_class_data_archive(spark: Any) -> None:
    if os.environ.get(SKIP_ENV) == "1":
        pytest.skip(f"{SKIP_ENV}=1: `tests/kafka_peers.py fetch` trained no archive")
    pyspark = spark_home.installed_pyspark()
    assert pyspark is not None
    if os.environ.get("SPARK_HOME") != str(spark_home.home(pyspark)):
        pytest.skip("the machine's own SPARK_HOME, not the tests' (tests/conftest.py)")
    archive = spark_home.archive(pyspark)
    assert archive is not None and archive.is_file(), (
        "no class-data archive for this pyspark and JDK: `python tests/kafka_peers.py fetch` "
        "(make peers) trains it"
    )
    pid = spark.sparkContext._gateway.proc.pid
    mapped = {line.split()[-1] for line in Path(f"/proc/{pid}/maps").read_text().splitlines()}
    assert str(archive) in mapped, f"Spark's JVM (pid {pid}) did not map {archive}"
