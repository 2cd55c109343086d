"""Exactly-once output of a stream into Spark's file sink across a driver
killed with SIGKILL (Spark's JVM and Python workers with it) and broker
restarts: the source replays each micro-batch's checkpointed offsets exactly,
so the sink's output holds every record once."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import stream_driver
from spark_helpers import create, fresh, produce

from trafka.brokerlite import RunningBroker
from trafka.brokerlite.server import broker_in_thread

pytestmark = pytest.mark.timeout(420)

DRIVER = Path(__file__).with_name("stream_driver.py")
SCHEMA = "partition int, offset long, value string"


class RestartableBroker:
    """A brokerlite that can be stopped and started again on the same port and data."""

    def __init__(self, data: Path) -> None:
        self.data = data
        self.port = 0
        self._stack: contextlib.ExitStack | None = None
        self.running: RunningBroker | None = None

    def start(self) -> RunningBroker:
        self._stack = contextlib.ExitStack()
        self.running = self._stack.enter_context(
            broker_in_thread(
                port=self.port,
                host="127.0.0.1",
                data_dir=self.data,
                group_initial_rebalance_delay_ms=0,
            )
        )
        self.port = self.running.address[1]
        return self.running

    def stop(self) -> None:
        if self._stack is not None:
            self._stack.close()
            self._stack = None


@pytest.fixture
def restartable(tmp_path: Path) -> Iterator[RestartableBroker]:
    broker = RestartableBroker(tmp_path / "broker")
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


class Driver:
    """The stream's driver in a process group of its own (killed all at once)."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.log = log.open("a")
        self.proc = subprocess.Popen(
            [sys.executable, str(DRIVER), *args],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        self.log.close()


class SinkLog:
    """Rows the file sink has committed, from its own log (``OUT/_spark_metadata``:
    a file per micro-batch, ``N`` or ``N.compact``, each a ``v1`` line then one
    JSON line per data file it added) and the row counts in those files'
    parquet footers: what the waits below poll every half second, instead of a
    Spark job reading the whole output each time (which competed for the CPU
    with the driver it waited for). The claim itself is checked with Spark."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self._rows: dict[str, int] = {}  # data file -> its rows

    def committed(self) -> int:
        import pyarrow.parquet as pq

        for entry in sorted((self.out / "_spark_metadata").glob("*")):
            if entry.name.startswith(".") or entry.name.endswith(".tmp"):
                continue  # Hadoop's checksums and files being written
            for line in entry.read_text().splitlines()[1:]:
                added = json.loads(line)
                path = urllib.parse.unquote(urllib.parse.urlparse(added["path"]).path)
                if added.get("action") == "add" and path not in self._rows:
                    self._rows[path] = pq.ParquetFile(path).metadata.num_rows
        return sum(self._rows.values())


def _until(what: str, check: Callable[[], bool], died: Callable[[], str | None]) -> None:
    """Wait for ``check``; ``died`` says why the stream ended, if it did."""
    deadline = time.monotonic() + 150
    while not check():
        assert (why := died()) is None, why
        assert time.monotonic() < deadline, f"not within 150 s: {what}"
        time.sleep(0.5)


def _driver_died(driver: Driver, log: Path) -> Callable[[], str | None]:
    def died() -> str | None:
        if driver.proc.poll() is None:
            return None
        return f"the driver died: {log.read_text()[-3000:]}"

    return died


def _query_ended(query: Any) -> Callable[[], str | None]:
    def ended() -> str | None:
        return None if query.isActive else f"the query ended: {query.exception()}"

    return ended


@pytest.mark.slow
def test_file_sink_output_is_exactly_once_across_a_driver_kill_and_broker_restarts(
    spark: Any, restartable: RestartableBroker, tmp_path: Path
) -> None:
    assert restartable.running is not None
    servers = restartable.running.bootstrap_servers
    topic = fresh("exactly-once")
    create(restartable.running, topic, 3)
    produce(restartable.running, topic, [(b"k%d" % (i % 7), b"v%d" % i, None) for i in range(400)])
    out, checkpoint, log = tmp_path / "out", tmp_path / "checkpoint", tmp_path / "driver.log"
    args = [servers, topic, str(out), str(checkpoint)]

    sink = SinkLog(out)
    committed = sink.committed

    # 1: a driver streams; the broker restarts under it; then it is killed with
    # SIGKILL mid-stream (batches of 40 records: most still to come). One driver
    # process: a second one, restarted from the checkpoint and killed again
    # after another restart under it, ran these same paths again (a driver
    # process's start is some 20 s of the suite's CPU); the recovery from a
    # killed driver's checkpoint is what step 3 proves.
    driver = Driver(args, log)
    try:
        _until("a first batch is committed", lambda: committed() >= 40, _driver_died(driver, log))
        before_restart = committed()
        restartable.stop()
        time.sleep(1)
        restartable.start()
        _until(
            "the stream goes on after the restart",
            lambda: committed() >= before_restart + 80,
            _driver_died(driver, log),
        )
    finally:
        driver.kill()
    first = committed()
    assert first < 400, "the stream read everything before it was killed"

    # 2: the broker restarts while no driver runs; more records arrive.
    restartable.stop()
    running = restartable.start()
    produce(running, topic, [(b"k%d" % (i % 7), b"v%d" % i, None) for i in range(400, 600)])

    # 3: a last driver finishes the work: the tests' own Spark (a JVM that saw
    # none of the kills, with only the checkpoint and the output to go on), which
    # spares the suite a second driver process's start. Its micro-batches take
    # up to 200 records: the batch the killed driver had planned and not
    # committed runs again as its offset log says, and the rest (some 480
    # records, a dozen batches of 40) in few batches.
    query = stream_driver.start_stream(spark, servers, topic, str(out), str(checkpoint), 200)
    try:
        _until("every record is in the output", lambda: committed() >= 600, _query_ended(query))
    finally:
        query.stop()

    rows = spark.read.schema(SCHEMA).parquet(str(out)).collect()
    assert len({(r.partition, r.offset) for r in rows}) == len(rows) == 600
    assert sorted(r.value for r in rows) == sorted(f"v{i}" for i in range(600))
