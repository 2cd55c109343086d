"""What a Spark Python worker imports to run a task of the data source.

Spark starts Python workers for the tasks of a read or a write; each unpickles
the reader or writer the driver planned (which imports ``trafka.spark`` and
then :mod:`trafka.spark.source`, where the classes live) and calls ``read`` or
``write``. Such a worker needs the wire reader or the producer, never the
admin client the driver plans with, whose import was about half of what the
data source cost a worker (bench/imports.py measures it); and a task that
reads over the wire reader needs neither the SDK's consumer nor its producer
(issue #60: some 0.2-0.3 CPU s of each worker), one that writes no consumer.
These tests run a
task as Spark's worker would, in a fresh interpreter that has loaded PySpark's
worker module, against a real brokerlite, and check what it loaded; and that
every public name of ``trafka.spark`` still resolves.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from typing import Any

import pyarrow as pa
import pytest
from pyspark import cloudpickle
from pyspark.sql.types import BinaryType, StructField, StructType
from spark_helpers import consume_all, create, fresh, produce

import trafka.spark
from trafka.brokerlite import RunningBroker
from trafka.spark import _kafka, options, schemas, source

pytestmark = pytest.mark.timeout(120)

# A task in a fresh interpreter: PySpark's worker module first (what a worker
# has loaded before the task's function is unpickled), then the pickled
# (kind, reader or writer, inputs) from stdin. Prints the result (the rows
# read, or the writer's commit message, pickled) and the trafka modules loaded.
TASK = """
import base64, json, sys
import pyspark.worker
from pyspark import cloudpickle

kind, task, inputs = cloudpickle.loads(sys.stdin.buffer.read())
if kind == "read":
    result = sum(batch.num_rows for part in inputs for batch in task.read(part))
else:
    result = base64.b64encode(cloudpickle.dumps(task.write(iter(inputs)))).decode()
loaded = sorted(name for name in sys.modules if name.startswith("trafka"))
print(json.dumps({"result": result, "loaded": loaded}))
"""

# Modules a task never calls: the driver's planning (the admin client), and the
# multicast side of zeroconf, which the driver resolves once for every task
# (the configuration's spec parsing, trafka.discovery itself, is every client's).
DRIVER_ONLY = ("trafka.sdk.admin", "trafka.discovery._mdns")


def run_task(kind: str, task: Any, inputs: list[Any]) -> tuple[Any, list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", TASK],
        input=cloudpickle.dumps((kind, task, inputs)),
        capture_output=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    answer = json.loads(done.stdout.decode().splitlines()[-1])
    return answer["result"], answer["loaded"]


# The async clients a reading task does without: the wire reader (trafka.spark._wire)
# fetches over plain sockets, and nothing of a read produces.
CLIENTS = ("trafka.sdk.consumer", "trafka.sdk.producer")


def driver_only(loaded: list[str]) -> list[str]:
    return [m for m in loaded if m.startswith(DRIVER_ONLY)]


def clients(loaded: list[str]) -> list[str]:
    return [m for m in loaded if m in CLIENTS]


def test_a_read_task_loads_no_admin_client(broker: RunningBroker) -> None:
    topic = fresh("worker-read")
    create(broker, topic, 2)
    produce(broker, topic, [(None, f"v{i}".encode(), None) for i in range(50)])
    data_source = source.KafkaDataSource(
        {"kafka.bootstrap.servers": broker.bootstrap_servers, "subscribe": topic}
    )
    reader = data_source.reader(source.SCHEMA)
    rows, loaded = run_task("read", reader, list(reader.partitions()))
    assert rows == 50
    assert "trafka.spark._wire" in loaded  # the task did read, with the wire reader
    assert driver_only(loaded) == []
    assert clients(loaded) == []


def test_a_stream_read_task_loads_no_admin_client(broker: RunningBroker) -> None:
    topic = fresh("worker-stream")
    create(broker, topic, 2)
    produce(broker, topic, [(None, f"v{i}".encode(), None) for i in range(30)])
    data_source = source.KafkaDataSource(
        {
            "kafka.bootstrap.servers": broker.bootstrap_servers,
            "subscribe": topic,
            "startingOffsets": "earliest",
            "latestOffsetWaitMs": "0",
        }
    )
    reader = data_source.streamReader(source.SCHEMA)
    assert isinstance(reader, source._StreamReader)
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        partitions = list(reader.partitions(start, end))
    finally:
        reader.stop()
    rows, loaded = run_task("read", reader, partitions)
    assert rows == 30
    assert driver_only(loaded) == []
    assert clients(loaded) == []


VALUES = StructType([StructField("value", BinaryType())])
"""The schema of a write of values alone."""


def batch(values: list[bytes]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array(values, pa.binary())], names=["value"])


def test_a_write_task_loads_no_admin_client(broker: RunningBroker) -> None:
    topic = fresh("worker-write")
    create(broker, topic, 1)
    data_source = source.KafkaDataSource(
        {"kafka.bootstrap.servers": broker.bootstrap_servers, "topic": topic}
    )
    writer = data_source.writer(VALUES, False)
    message, loaded = run_task("write", writer, [batch([b"a", b"b", b"c"])])
    assert cloudpickle.loads(base64.b64decode(message)).records == 3
    assert sorted(r.value for r in consume_all(broker, topic, 1)) == [b"a", b"b", b"c"]
    assert driver_only(loaded) == []
    assert clients(loaded) == ["trafka.sdk.producer"]


def test_an_exactly_once_write_task_loads_no_admin_client(broker: RunningBroker) -> None:
    topic = fresh("worker-eos")
    create(broker, topic, 1)
    data_source = source.KafkaDataSource(
        {
            "kafka.bootstrap.servers": broker.bootstrap_servers,
            "topic": topic,
            "deliveryGuarantee": "exactly-once",
        }
    )
    writer = data_source.writer(VALUES, False)
    message, loaded = run_task("write", writer, [batch([b"x", b"y"])])
    assert driver_only(loaded) == []
    assert clients(loaded) == ["trafka.sdk.producer"]
    # The task's transaction is whole: the driver (here) commits it.
    writer.commit([cloudpickle.loads(base64.b64decode(message))])
    committed = consume_all(broker, topic, 1, isolation_level="read_committed")
    assert sorted(r.value for r in committed) == [b"x", b"y"]


def test_importing_the_package_loads_no_client() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, sys, trafka.spark; print(json.dumps(sorted(sys.modules)))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    loaded = [m for m in json.loads(done.stdout) if m.startswith("trafka.")]
    assert [m for m in loaded if not m.startswith("trafka.common")] == ["trafka.spark"]


def test_every_public_name_resolves_to_its_module() -> None:
    assert set(trafka.spark.__all__) <= set(dir(trafka.spark))
    homes = {
        "SCHEMA": source,
        "KafkaDataSource": source,
        "register": source,
        "ReadOptions": options,
        "WriteOptions": options,
        "parse_read_options": options,
        "parse_write_options": options,
        "offsets_behind_latest": _kafka,
        "from_registry": schemas,
        "to_registry": schemas,
    }
    assert set(homes) == set(trafka.spark.__all__)
    for name, home in homes.items():
        assert getattr(trafka.spark, name) is getattr(home, name)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        trafka.spark.nothing  # noqa: B018
