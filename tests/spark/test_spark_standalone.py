"""The data source on a standalone Spark cluster (a master and two workers, each
its own JVM, one core each), not only ``local[2]``: executors in other
processes start Python workers that read and write with trafka."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from spark_helpers import TEST_JVM_OPTIONS, consume_all, create, fresh, produce

from trafka.brokerlite import RunningBroker
from trafka.brokerlite.dev.local_cluster import free_port

pytestmark = pytest.mark.timeout(300)

HERE = Path(__file__).resolve().parent


def _spark_class() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[str]:
    """``spark://...`` of a master with two one-core workers (stopped after the test)."""
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

    try:
        start(
            "master", "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(free_port()),
        )  # fmt: skip
        for i in range(2):
            start(
                f"worker{i}", "org.apache.spark.deploy.worker.Worker", master,
                "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                "--webui-port", str(free_port()), "--work-dir", str(tmp_path / f"work{i}"),
            )  # fmt: skip
        deadline = time.monotonic() + 90
        while (tmp_path / "master.log").read_text().count("Registering worker") < 2:
            assert time.monotonic() < deadline, (tmp_path / "master.log").read_text()[-2000:]
            assert all(p.poll() is None for p in procs), "a Spark daemon died"
            time.sleep(0.5)
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


@pytest.mark.slow
def test_a_standalone_cluster_with_two_workers_reads_and_writes(
    broker: RunningBroker, standalone: str, tmp_path: Path
) -> None:
    source, sink = fresh("standalone-in"), fresh("standalone-out")
    create(broker, source, 8)
    create(broker, sink, 3)
    metas = produce(broker, source, [(b"k%d" % i, b"v%d" % i, None) for i in range(2000)])
    expected = sorted([m.partition, m.offset, f"v{i}"] for i, m in enumerate(metas))
    out = subprocess.run(
        [
            sys.executable, str(HERE / "standalone_driver.py"), standalone,
            broker.bootstrap_servers, source, sink,
        ],
        capture_output=True, timeout=240, env=dict(os.environ, SPARK_LOCAL_IP="127.0.0.1"),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr.decode()[-3000:]
    result: dict[str, Any] = json.loads(out.stdout.decode().strip().splitlines()[-1])
    assert result["executors"] == 2  # one on each worker
    assert sorted(result["rows"]) == expected
    written = consume_all(broker, sink, 3)
    assert sorted(r.value for r in written) == sorted(b"v%d" % i for i in range(2000))
