"""The data source on a standalone Spark cluster (a master and two workers, each
its own JVM, one core each), not only ``local[2]``: executors in other
processes start Python workers that read and write with trafka.

The same driver (tests/spark/standalone_driver.py) runs the exactly-once sink
in a Spark that retries a failed task, which the tests' ``local[2]`` never
does: the retry fences its failed attempt (the zombie) on brokerlite. One
driver for both, run once for the module: the daemons', the driver's and its
executors' starts are most of what either costs (the task retry had a
``local[2,2]`` driver of its own, some 19 s of the suite)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from spark_helpers import (
    TEST_JVM_OPTIONS,
    committed,
    consume_all,
    create,
    everything,
    fresh,
    produce,
    run,
)

from trafka.brokerlite import RunningBroker
from trafka.brokerlite.dev.local_cluster import free_port
from trafka.sdk import ProducerFencedError, open_admin
from trafka.sdk.txn_handoff import PreparedTransaction, end_transaction
from trafka.spark import _eos

# The daemons' starts, then the driver (ran) within the first test's timeout.
pytestmark = pytest.mark.timeout(420)

HERE = Path(__file__).resolve().parent


def _spark_class() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``spark://...`` of a master with two one-core workers (stopped after the module)."""
    tmp_path = tmp_path_factory.mktemp("standalone")
    env = dict(
        os.environ,
        PYSPARK_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_WORKER_DIR=str(tmp_path / "work"),
        SPARK_LOG_DIR=str(tmp_path / "logs"),
        # No REST submission server: its fixed port would clash with other runs.
        SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
        SPARK_DAEMON_JAVA_OPTS=TEST_JVM_OPTIONS,
    )
    port = free_port()
    master = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []
    logs = []

    def start(name: str, *args: str) -> None:
        log = (tmp_path / f"{name}.log").open("wb")
        logs.append(log)
        procs.append(
            subprocess.Popen(
                [_spark_class(), *args], env=env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )  # fmt: skip

    def logged(line: str, times: int) -> None:
        """Wait until the master has logged ``line`` ``times`` times."""
        deadline = time.monotonic() + 90
        while (tmp_path / "master.log").read_text().count(line) < times:
            assert time.monotonic() < deadline, (tmp_path / "master.log").read_text()[-2000:]
            assert all(p.poll() is None for p in procs), "a Spark daemon died"
            time.sleep(0.1)

    try:
        start(
            "master", "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(free_port()),
        )  # fmt: skip
        # The workers once the master serves: a worker that finds no master (or
        # one not yet elected) tries again only 5 to 15 s later (Spark's Worker
        # waits a fuzzed 10 s), as one did in 14 s of a 69 s run here.
        logged("I have been elected leader", 1)
        for i in range(2):
            start(
                f"worker{i}", "org.apache.spark.deploy.worker.Worker", master,
                "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                "--webui-port", str(free_port()), "--work-dir", str(tmp_path / f"work{i}"),
            )  # fmt: skip
        logged("Registering worker", 2)
        yield master
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 15)
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait(10)
        for log in logs:
            log.close()


@dataclass
class Ran:
    """What the module's driver was given and what it printed."""

    #: its JSON line: the rows its batch read returned, its executors
    result: dict[str, Any]
    #: the batch read's source topic's rows, as (partition, offset, value)
    expected: list[list[Any]]
    sink: str
    #: the exactly-once stream's source values (sorted), its sink, its checkpoint
    values: list[bytes]
    eos_sink: str
    checkpoint: Path
    #: where the failed task attempt noted its transaction (zombie.json)
    notes: Path


@pytest.fixture(scope="module")
def ran(broker: RunningBroker, standalone: str, tmp_path_factory: pytest.TempPathFactory) -> Ran:
    """tests/spark/standalone_driver.py, run once against the standalone
    cluster: a batch read of 2,000 records over 8 partitions written to a
    3-partition topic, and an exactly-once stream of 200 keyed records (over 2
    partitions, into 2) whose task of micro-batch 1 fails once after writing."""
    folder = tmp_path_factory.mktemp("standalone-driver")
    source, sink = fresh("standalone-in"), fresh("standalone-out")
    create(broker, source, 8)
    create(broker, sink, 3)
    metas = produce(broker, source, [(b"k%d" % i, b"v%d" % i, None) for i in range(2000)])
    expected = sorted([m.partition, m.offset, f"v{i}"] for i, m in enumerate(metas))
    eos_source, eos_sink = fresh("eos-src"), fresh("eos-sink")
    create(broker, eos_source, 2)
    values = [f"v{i}".encode() for i in range(200)]
    produce(broker, eos_source, [(b"k%d" % i, v, None) for i, v in enumerate(values)])
    create(broker, eos_sink, 2)
    checkpoint = folder / "checkpoint"
    out = subprocess.run(
        [
            sys.executable, str(HERE / "standalone_driver.py"), standalone,
            broker.bootstrap_servers, source, sink, eos_source, eos_sink, str(checkpoint),
            str(folder),
        ],
        capture_output=True, timeout=330,
        env=dict(os.environ, SPARK_LOCAL_IP="127.0.0.1"),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr.decode()[-4000:]
    result: dict[str, Any] = json.loads(out.stdout.decode().strip().splitlines()[-1])
    return Ran(result, expected, sink, sorted(values), eos_sink, checkpoint, folder)


@pytest.mark.slow
def test_a_standalone_cluster_with_two_workers_reads_and_writes(
    broker: RunningBroker, ran: Ran
) -> None:
    assert ran.result["executors"] == 2  # one on each worker
    assert sorted(ran.result["rows"]) == ran.expected
    written = consume_all(broker, ran.sink, 3)
    assert sorted(r.value for r in written) == sorted(b"v%d" % i for i in range(2000))


@pytest.mark.slow
def test_a_task_that_fails_after_writing_is_retried_and_its_zombie_fenced(
    broker: RunningBroker, ran: Ran
) -> None:
    """The first attempt of micro-batch 1's task of partition 0 writes its rows
    and fails; the second, on the same transactional id, fences it (a higher
    epoch) and aborts its transaction."""
    sink, values = ran.eos_sink, ran.values
    assert committed(broker, sink, 2) == values
    noted = json.loads((ran.notes / "zombie.json").read_text())
    zombie = PreparedTransaction.from_json(noted["transaction"])
    # The first attempt's rows were written, then aborted by its retry.
    assert noted["records"] > 0
    assert len(everything(broker, sink, 2)) == 200 + noted["records"]
    decided = _eos.CommitLog(str(ran.checkpoint)).read(1)
    assert decided is not None and decided.committed
    (retry,) = [t for t in decided.transactions if t.transactional_id == zombie.transactional_id]
    assert retry.producer_id == zombie.producer_id
    assert retry.producer_epoch > zombie.producer_epoch

    async def zombie_commits() -> None:
        with anyio.fail_after(30):
            async with open_admin(bootstrap_servers=broker.bootstrap_servers) as admin:
                await end_transaction(admin, zombie, commit=True)

    with pytest.raises(ProducerFencedError):
        run(zombie_commits)
    assert committed(broker, sink, 2) == values
