"""The SPARK_HOME every Spark of a test run uses (tests/conftest.py sets it),
for pip's pyspark: its Python workers import pyspark with its bytecode, and its
JVMs map a class-data-sharing archive of Spark's classes.

Rules:

* The home is ``.cache/spark-home/<key>/`` (ignored by git), the key naming the
  installed pyspark's folder: the same path in every run of one environment,
  and another for another environment (a second checkout sharing this
  ``.cache`` keeps its own links instead of re-pointing these). It holds links
  to everything of the installed pyspark but its ``python`` folder.
  A JVM accepts a class-data archive only with the class path it was written
  with, and Spark's is ``$SPARK_HOME/conf/:$SPARK_HOME/jars/*``: a home made
  afresh per run (as it was) would refuse every archive. The home has no
  ``conf/`` folder: the JDK neither writes nor maps an archive whose class path
  holds a directory with files in it.
* Without the ``python`` folder, Spark's Python workers import the installed
  pyspark with its bytecode instead of ``python/lib/pyspark.zip``, sources
  only, which each daemon and worker compiled again (about 1.2 s of a core
  each; docs/design.md).
* tests/conftest.py gives every driver JVM the flags that map the archive
  (:func:`share_flags`, in ``SPARK_SUBMIT_OPTS``, which spark-submit reads), and
  the executors and standalone daemons get them from
  tests/spark/spark_helpers.py's ``TEST_JVM_OPTIONS`` (through :data:`FLAGS_ENV`).
* :func:`train` writes the archive (the JDK's dynamic AppCDS, as
  tests/kafka_peers.py's for Kafka's JVMs): one Spark session on this home,
  run through what the tests run (a local job, the ``trafka`` source and sink
  on a brokerlite, a stream to parquet), whose JVM writes the classes it loaded
  when it exits. Its name carries the JDK and Spark's jars it was made from, so
  a new pyspark or JDK trains a new one. ``python tests/kafka_peers.py fetch``
  (``make peers``) runs it. Measured on a loaded two-core machine: a session's
  start and first job went from about 15 s of CPU to 6.5 s.
* A JVM that refuses the archive loads its classes from the jars as before,
  silently (its ``-Xlog:cds`` output is off).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOMES = ROOT / ".cache" / "spark-home"
#: The archive's flags, as tests/conftest.py gives them to the run (for executors).
FLAGS_ENV = "TRAFKA_SPARK_CDS"


def installed_pyspark() -> Path | None:
    """The installed pyspark's folder (found, not imported: no JVM, no py4j)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def home(pyspark: Path) -> Path:
    """The home of this pyspark (see the module's rules)."""
    return HOMES / hashlib.sha256(str(pyspark).encode()).hexdigest()[:12]


def archive(pyspark: Path) -> Path | None:
    """Where the archive of this JDK and this pyspark's jars is (None without java)."""
    java = shutil.which("java")
    if java is None:
        return None
    key = hashlib.sha256()
    for path in (Path(java).resolve(), *sorted((pyspark / "jars").glob("spark-*.jar"))):
        stat = path.stat()
        key.update(f"{path}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return home(pyspark) / f"spark-{key.hexdigest()[:16]}.jsa"


def share_flags() -> str:
    """The JVM flags that map the archive, or "" while there is none."""
    pyspark = installed_pyspark()
    found = None if pyspark is None else archive(pyspark)
    if found is None or not found.is_file():
        return ""
    return f"-XX:SharedArchiveFile={found} -Xlog:cds=off -Xlog:cds+dynamic=off"


def prepare() -> str | None:
    """The home made (or brought up to date): its path, or None without pyspark."""
    pyspark = installed_pyspark()
    if pyspark is None:
        return None
    made = home(pyspark)
    made.mkdir(parents=True, exist_ok=True)
    for entry in pyspark.iterdir():
        link = made / entry.name
        if entry.name == "python" or (link.is_symlink() and link.resolve() == entry):
            continue
        if link.is_symlink():  # left by another pyspark
            link.unlink()
        try:
            link.symlink_to(entry)
        except FileExistsError:  # another run made it meanwhile
            pass
    return str(made)


def train() -> None:
    """The archive, when missing (see the module's rules); a failed training
    leaves none and says why on standard error."""
    pyspark = installed_pyspark()
    found = None if pyspark is None else archive(pyspark)
    if found is None or found.is_file():
        return
    prepare()
    part = found.with_suffix(".jsa.part")
    env = {**os.environ, "SPARK_HOME": str(found.parent), "PYSPARK_PYTHON": sys.executable}
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env.pop("SPARK_SUBMIT_OPTS", None)  # an archive in use cannot be written on
    try:
        done = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "workload", str(part)],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        failed, said = done.returncode != 0, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        failed, said = True, f"{exc}"
    if failed or not part.is_file():
        tail = "\n".join(said.splitlines()[-20:])
        print(f"warning: Spark's class-data archive not made:\n{tail}", file=sys.stderr)
        part.unlink(missing_ok=True)
        return
    for old in found.parent.glob("spark-*.jsa"):
        old.unlink()
    part.replace(found)


def _workload(part: str) -> None:
    """What the training session runs (in a process of its own: its JVM writes
    the archive when it exits)."""
    from pyspark.sql import SparkSession

    from trafka.brokerlite.server import broker_in_thread
    from trafka.spark import register

    with (
        tempfile.TemporaryDirectory(prefix="trafka-spark-cds-") as tmp,
        broker_in_thread(port=0, host="127.0.0.1", data_dir=Path(tmp, "broker")) as broker,
    ):
        spark = (
            SparkSession.builder.master("local[2]")
            .appName("trafka-cds")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.defaultJavaOptions", f"-XX:ArchiveClassesAtExit={part}")
            .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        servers = broker.bootstrap_servers
        rows = spark.range(300).selectExpr(
            "CAST(id % 7 AS STRING) AS key", "CAST(id AS STRING) AS value"
        )
        rows.write.mode("append").format("trafka").option(
            "kafka.bootstrap.servers", servers
        ).option("topic", "cds").save()
        source = (
            spark.read.format("trafka")
            .option("kafka.bootstrap.servers", servers)
            .option("subscribe", "cds")
            .load()
        )
        source.groupBy("key").count().collect()
        query = (
            spark.readStream.format("trafka")
            .option("kafka.bootstrap.servers", servers)
            .option("subscribe", "cds")
            .option("startingOffsets", "earliest")
            .load()
            .selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
            .writeStream.format("parquet")
            .option("path", str(Path(tmp, "out")))
            .option("checkpointLocation", str(Path(tmp, "checkpoint")))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(300)
        spark.read.parquet(str(Path(tmp, "out"))).count()
        spark.stop()
    # The JVM writes the archive as it exits, once its standard input closes:
    # waited for here, so the file is whole when this process ends.
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is not None:
        gateway.proc.stdin.close()
        gateway.proc.wait(timeout=600)


if __name__ == "__main__":
    if sys.argv[1:2] == ["workload"]:
        _workload(sys.argv[2])
    elif sys.argv[1:] == ["train"]:
        train()
    else:
        sys.exit(f"usage: {sys.argv[0]} train")
