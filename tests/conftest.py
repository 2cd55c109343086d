"""Makes the helper modules at the top of ``tests/`` (shared by several folders)
importable by name, as each folder's own helpers already are; and the ZooKeeper
fixtures of the cluster tests (brokerlite's and the proxy's):

* ``zookeeper``: one ZooKeeper server per pytest process (per xdist worker),
  started lazily, shared: tests never stop it. ``zk_chroot`` gives a test its
  own empty chroot on it (``.path``, ``.connect_string`` = ``host:port/chroot``).
  ``make_zookeeper`` makes private servers for tests that stop, kill or restart
  ZooKeeper. All skip when ZooKeeper is not installed.
* ``kafkajs``: the command running ``tests/interop/kafkajs/client.js`` with
  npm's kafkajs installed into a temporary directory (skips without node/npm).
* ``build_go_client``: builds one of the Go clients of ``tests/interop/`` in
  GOPATH mode against Debian's Go packages (``/usr/share/gocode``), or skips
  the test saying what is missing (the old-protocol interop tests).
* ``go_peers``: the binary of ``tests/interop/gopeers`` (franz-go, IBM/sarama and
  kafka-go from the Go module proxy; see ``tests/go_peers.py``), built once per
  run in module mode; skips only when Go is not installed.

Hypothesis runs without its per-example deadline or its too-slow health check
(the ``trafka`` profile, loaded here): both are timing thresholds, which a
loaded two-core machine trips while the property itself holds.

And the order in which the suite's files are handed to pytest-xdist's workers
(``make pytest``: ``--dist loadfile --no-loadscope-reorder``): the few files of
:data:`FIRST_FILES` (a unit of minutes), then every file holding a test marked
``slow`` (one of tens of seconds), in collection order, then the others. A worker takes the next file when it is done with one, so the long
files spread over both workers while short ones are left to even out the end;
xdist's own order (most tests first) left the one-test files of a minute or more
(Spark's exactly-once run, the cluster durability tests) to the end, where one
worker ran them while the other had nothing left.

A file is one unit of work, except those of :data:`SPREAD_FILES` (several tests
of tens of seconds each, which share nothing costly): their tests are handed out
one by one (``pytest_xdist_make_scheduler`` below), so that both workers take
some of them instead of one running two or three minutes of them alone while the
other's queue runs dry. Their module-scoped fixtures are then made once per
worker (the file's tests stay next to each other in the queue); a file whose
tests share a costly module fixture stays whole.

With more workers than cores (``PYTEST_WORKERS`` in the Makefile), the heaviest
work of :data:`CONFINED` (Spark's session, JVMs and Python workers; the
three-node Kafka clusters, three JVMs each) goes to the first worker only,
``gw0`` (:data:`CONFINED_WORKERS`), which takes it before anything else: each
worker that takes it starts its own Spark and its own clusters (at two, each
was started twice: the memory and the start-up CPU of two), and the Spark
files, run on four workers beside another engineer's tests, failed on
timeouts of Spark's own (a Python worker not connecting back, a session never
registering trafka's source). The other workers take the rest; CONFINED's work
mostly waits (Spark, kills and restarts), so one worker's share of it is about
what each of the others gets of the rest. When a confining worker then starts
a test from outside CONFINED, that work is done and the session fixtures only
it uses (:data:`CONFINED_FIXTURES`) stop there and then
(tests/released_peers.py) instead of idling to the end of the run.

Bytecode: when Python writes none (``PYTHONDONTWRITEBYTECODE``, as in the
machines the suite runs on), every process the tests start (the CLI's, the
brokers and proxies of the cluster tests, the bench scripts, Spark's Python
workers: hundreds) compiled trafka's modules from source again, some 0.3 to 0.6 s
of CPU each. The suite then writes bytecode to a temporary directory of its own
(``PYTHONPYCACHEPREFIX``, inherited by the xdist workers and every process they
start; the source tree gets no ``__pycache__``), removed at the end of the run.
Before the workers start, two collecting runs write it for them
(``_warm_bytecode``): the three used to compile everything at once, each for itself.

Spark's Python workers likewise: every Spark the run starts (tests/spark's
sessions and drivers, the bench smoke's Spark lines, the demo's) gets the
``SPARK_HOME`` of tests/spark_home.py (links to pip's pyspark without its
sources-only zip; its JVMs map a class-data archive of Spark's classes), set
once for the whole run as ``PYTHONPYCACHEPREFIX`` is, unless the machine has a
Spark of its own (``SPARK_HOME`` already set).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import released_peers
from hypothesis import HealthCheck, settings

from trafka.brokerlite.dev.zookeeper_server import ZooKeeperServer, zookeeper_available

settings.register_profile("trafka", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("trafka")

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

# A trio run a timed-out test abandoned is ended before the next test (see the module);
# Apache Kafka's brokers as fixtures (see kafka_fixtures); docs/compatibility.md's
# table checked against the outcomes of the tests marked compat (see compat_page);
# with TRAFKA_TIMING_OUT set, every test phase's seconds recorded (see suite_timing);
# a test that leaves SIGINT ignored or blocked errors (see signal_hygiene).
pytest_plugins = [
    "abandoned_runs",
    "kafka_fixtures",
    "compat_page",
    "suite_timing",
    "signal_hygiene",
]


_PYCACHE = pytest.StashKey[str]()
_SPARK_HOME = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    """Bytecode to a directory of the run's own, and a SPARK_HOME of its own
    (see the module's docstring). In the process that starts the xdist workers
    (or runs alone): the workers and what they start inherit them."""
    if hasattr(config, "workerinput"):
        return
    if "SPARK_HOME" not in os.environ:
        import spark_home  # tests/'s, on the path (above)

        home = spark_home.prepare()
        if home is not None:
            config.stash[_SPARK_HOME] = home
            os.environ["SPARK_HOME"] = home
            # Every driver's JVM maps Spark's class-data archive (spark-submit
            # reads SPARK_SUBMIT_OPTS); the executors' get it from
            # tests/spark/spark_helpers.py's TEST_JVM_OPTIONS, through this variable.
            flags = spark_home.share_flags()
            if flags:
                os.environ[spark_home.FLAGS_ENV] = flags
                os.environ["SPARK_SUBMIT_OPTS"] = (
                    f"{os.environ.get('SPARK_SUBMIT_OPTS', '')} {flags}"
                )
    if sys.dont_write_bytecode and not sys.pycache_prefix:
        cache = tempfile.mkdtemp(prefix="trafka-tests-pycache-")
        config.stash[_PYCACHE] = cache
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        os.environ["PYTHONPYCACHEPREFIX"] = cache
        sys.pycache_prefix = cache
        sys.dont_write_bytecode = False
    _warm_bytecode(config)


#: Set in the collecting runs of :func:`_warm_bytecode` (they warm nothing themselves).
_WARMING_ENV = "TRAFKA_TESTS_WARMING"
#: Fewer files than this, and the workers collect them faster than a warming run starts.
_WARM_FROM_FILES = 20


def _warm_bytecode(config: pytest.Config) -> None:
    """Before xdist starts its workers: the bytecode every one of them needs
    (the test modules as pytest rewrites their asserts, trafka's modules, its
    dependencies'), written once, by two collecting runs side by side.

    Every worker collects the whole suite. With no bytecode yet (a fresh clone,
    or the run's own cache above) each compiled it all for itself, all three at
    the same moment: some 32 CPU s a worker, against 7 s with the bytecode
    there, so the run's first minute went to compiling the same files three
    times over. Best effort: a failure here shows again in the workers' own
    collection, where it is reported."""
    workers = config.getoption("numprocesses", None)
    if not workers or os.environ.get(_WARMING_ENV, "") == "1":
        return
    files: list[str] = []
    for arg in config.args:
        path = config.rootpath / arg.split("::", 1)[0]
        files += [str(path)] if path.is_file() else sorted(map(str, path.rglob("test_*.py")))
    if len(files) < _WARM_FROM_FILES:
        return
    argv = [sys.executable, "-m", "pytest", "--collect-only", "-q"]
    argv += ["-p", "no:xdist", "-p", "no:cacheprovider"]
    env = {**os.environ, _WARMING_ENV: "1"}
    runs = [
        subprocess.Popen(
            [*argv, *files[half::2]],
            cwd=config.rootpath,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for half in (0, 1)
        if files[half::2]
    ]
    for run in runs:
        run.wait()


def pytest_unconfigure(config: pytest.Config) -> None:
    home = config.stash.get(_SPARK_HOME, None)
    if home is not None:  # kept: the same path in every run (see tests/spark_home.py)
        os.environ.pop("SPARK_HOME", None)
    cache = config.stash.get(_PYCACHE, None)
    if cache is not None:
        # Off first: a module imported while the process ends would make the directory again.
        sys.pycache_prefix = None
        sys.dont_write_bytecode = True
        shutil.rmtree(cache, ignore_errors=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files of :data:`FIRST_FILES` first, then the others with a ``slow``
    test (see the module's docstring); each file's tests keep their order and
    stay together."""
    _check_confined(items)
    slow = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(
        key=lambda item: (item.nodeid.split("::", 1)[0] not in FIRST_FILES, item.path not in slow)
    )


#: The session fixtures that start a JVM (or several) the first time a pytest
#: process asks for one, and the seconds a test that starts one gets on top of
#: its own timeout (pytest-timeout's, which counts the fixtures' set-up too).
#: A start is some 5 to 30 s on a quiet machine; beside other engineers' runs
#: (load average 20 to 29 on 2 cores, 4 workers) Spark's session took over 120 s
#: to start, failed the first test's 120 s timeout, and every later Spark test of
#: that worker then failed on the half-made session.
SESSION_STARTS = frozenset(
    {"spark", "zookeeper", "kafka3", "kafka3_cluster", "kafka4", "kafka4_cluster"}
)
SESSION_START_ALLOWANCE = 300.0
_started: set[str] = set()


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef: Any, request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if fixturedef.scope == "session":
        _started.add(fixturedef.argname)


def _starts(item: pytest.Item) -> set[str]:
    """The fixtures of :data:`SESSION_STARTS` that ``item`` will start: those it
    names, and the broker its ``kafka`` or ``peer`` parameter picks, not yet started."""
    names = set(getattr(item, "fixturenames", ()))
    params = getattr(getattr(item, "callspec", None), "params", {})
    for name in ("kafka", "peer"):
        if name in names:
            names.add({"3.9": "kafka3", "4": "kafka4"}.get(params.get(name), ""))
    if names & {"kafka3", "kafka3_cluster"}:
        names.add("zookeeper")
    return names.intersection(SESSION_STARTS) - _started


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """A test that starts one of the :data:`SESSION_STARTS` gets
    :data:`SESSION_START_ALLOWANCE` more seconds of timeout (set before
    pytest-timeout's own wrapper reads it)."""
    if _starts(item):
        marker = item.get_closest_marker("timeout")
        timeout = (
            (item.config.getoption("timeout", None) or item.config.getini("timeout"))
            if marker is None
            else None
        )
        args: tuple[Any, ...] = ()
        kwargs: dict[str, Any] = {}
        if marker is not None:
            args, kwargs = marker.args, dict(marker.kwargs)
            timeout = kwargs.pop("timeout", None) if not args else args[0]
            args = args[1:]
        if timeout:
            more = float(timeout) + SESSION_START_ALLOWANCE
            item.add_marker(pytest.mark.timeout(more, *args, **kwargs), append=False)
    yield


#: The files whose tests ``make pytest`` hands to its workers one by one rather
#: than as a whole (see the module's docstring), as paths from the repository's
#: root (pytest's node ids start with them).
SPREAD_FILES = frozenset(
    {
        "tests/bench/test_bench_smoke.py",  # ten bench scripts, 15 to 45 s each
        "tests/brokerlite/test_cluster_durability.py",  # a cluster of processes per test
        "tests/brokerlite/test_cluster_processes.py",
        "tests/spark/test_spark_cluster.py",
        "tests/spark/test_spark_connections.py",
        "tests/spark/test_spark_eos_cluster.py",  # its cluster once per worker (some 5 s)
        "tests/spark/test_spark_eos_sink.py",  # the module's broker runs in a thread
        "tests/spark/test_spark_source.py",
    }
)


#: The files handed out before any other (``make pytest``): one unit of work of
#: minutes that, taken in collection order among the slow files, could be the
#: last long unit of the run on one worker while the others' queues run dry.
#: The first worker outside CONFINED's takes it at the start.
FIRST_FILES = frozenset(
    {
        "tests/interop/test_kgo_suite_cluster.py",  # kgo's suite on 3 nodes, 1 to 3 minutes
        "tests/interop/test_kafkago_suite.py",  # kafka-go's suite, 3 to 4 minutes of waits
    }
)


#: The structural tests that walk every module of the package: one unit of work,
#: so that one worker parses the package once for all three (tests/source_trees.py;
#: 23.5 s in three processes, about 10 s in one).
SHARED_PARSE_FILES = frozenset(
    {"tests/test_api_keys.py", "tests/test_layers.py", "tests/test_sizes.py"}
)


#: The work (a folder, or files, as paths from the repository's root) that only
#: the first :data:`CONFINED_WORKERS` workers take (see the module's docstring):
#: what starts Spark, and what runs on the three-node Kafka clusters
#: (``kafka4_cluster``, ``kafka3_cluster``, ``kafka_cluster``).
CONFINED = (
    "tests/spark/",
    "tests/bench/test_bench_smoke.py",  # Spark's bench lines, and both clusters
    "tests/proxy/test_proxy_go_clients.py",  # a cluster by getfixturevalue, as the next
    "tests/proxy/test_proxy_ha.py",
    "tests/proxy/test_proxy_kafka_consume.py",
    "tests/proxy/test_proxy_kafka_faults.py",
    "tests/proxy/test_proxy_kafka_journal.py",
    "tests/proxy/test_proxy_kafka_leader_moves.py",
    "tests/proxy/test_proxy_kafka_routing.py",
    "tests/sdk/test_sdk_kafka_admin.py",
    "tests/sdk/test_sdk_kafka_versions.py",
    "tests/tools/test_cli_kafka.py",
)
#: How many workers take CONFINED's work (``TRAFKA_CONFINED_WORKERS``, default
#: 1): each starts its own Spark and clusters. Measured (s92, one head, quiet
#: machine, tests/suite_timing.py's record): ``-n 3`` with two confining workers
#: 1,423 s; ``-n 4`` with one 1,272 s, the four workers done within 23 s of
#: each other.
CONFINED_WORKERS = int(os.environ.get("TRAFKA_CONFINED_WORKERS", "1"))


def _check_spread_files() -> None:
    """A file renamed or removed must leave :data:`SPREAD_FILES` and :data:`CONFINED` too."""
    root = Path(_HERE).parent
    named = SPREAD_FILES.union(CONFINED, SHARED_PARSE_FILES, FIRST_FILES)
    gone = sorted(name for name in named if not (root / name).exists())
    if gone:
        raise pytest.UsageError(f"tests/conftest.py: SPREAD_FILES or CONFINED name no file: {gone}")


_check_spread_files()

#: The session fixtures only :data:`CONFINED`'s files may use (checked at collection):
#: the first workers stop them when they go on to other work (:func:`_release_peers`).
CONFINED_FIXTURES = frozenset({"spark", "kafka3_cluster", "kafka4_cluster", "kafka_cluster"})


#: A test module asking for one of :data:`CONFINED_FIXTURES` by name, as
#: ``request.getfixturevalue(f"kafka{version}_cluster")`` does.
_ASKS_CONFINED = re.compile(r"""getfixturevalue\(\s*f?["'](kafka[^"']*_cluster|spark)["']""")


def _check_confined(items: list[pytest.Item]) -> None:
    """Only CONFINED's files may use :data:`CONFINED_FIXTURES`: as a test's
    arguments, or asked for by name in the test's file (``getfixturevalue``)."""
    outside = {item.path for item in items if not item.nodeid.startswith(CONFINED)}
    naming = {path for path in outside if _ASKS_CONFINED.search(path.read_text())}
    strays = sorted(
        item.nodeid
        for item in items
        if item.path in naming
        or (
            CONFINED_FIXTURES.intersection(getattr(item, "fixturenames", ()))
            and not item.nodeid.startswith(CONFINED)
        )
    )
    if strays:
        raise pytest.UsageError(
            "tests/conftest.py: these use a fixture of CONFINED_FIXTURES from a file "
            f"CONFINED does not name (add the file there): {strays[:5]}"
        )


def _releasing(config: pytest.Config) -> bool:
    """Whether this process is one of the first xdist workers of a run with more
    (the only ones CONFINED's work goes to, before any other: see the scheduler)."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None or int(workerinput.get("workercount", 0)) <= CONFINED_WORKERS:
        return False
    number = str(workerinput.get("workerid", ""))[2:]
    return number.isdigit() and int(number) < CONFINED_WORKERS


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """On a worker that took CONFINED's work first, the first test from outside it
    means that work is done: its session peers stop (see tests/released_peers.py).
    A CONFINED test after that (a crashed worker's work handed out again) that
    needs one fails saying so, rather than on a stopped cluster."""
    if not _releasing(item.config):
        return
    if not item.nodeid.startswith(CONFINED):
        released_peers.release()
        return
    wanted = set(getattr(item, "fixturenames", ()))
    if "kafka_cluster" in wanted:
        wanted |= {"kafka3_cluster", "kafka4_cluster"}
    gone = released_peers.released() & wanted
    if gone:
        pytest.fail(
            f"{sorted(gone)} stopped when this worker went on to other files "
            "(tests/released_peers.py); CONFINED's work reached it after that",
            pytrace=False,
        )


try:
    from xdist.scheduler import LoadFileScheduling
except ImportError:  # pytest-xdist is a dev dependency; without it the suite runs in one process
    pass
else:

    class _SpreadFileScheduling(LoadFileScheduling):
        """``--dist loadfile``, but each test of :data:`SPREAD_FILES` a unit of its
        own, and the units of :data:`CONFINED` for the first workers alone."""

        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            if path in SHARED_PARSE_FILES:
                return "tests/ (the structural tests)"
            return nodeid if path in SPREAD_FILES else path

        def _assign_work_unit(self, node: Any) -> None:
            """The next unit ``node`` may take (for the confined workers, the next
            confined one first), or none: a worker left without work idles until
            the run ends, as it does when the queue runs dry."""
            if len(self.nodes) > CONFINED_WORKERS:
                confining = _worker_number(node) < CONFINED_WORKERS
                units = [scope for scope in self.workqueue if scope.startswith(CONFINED)]
                if not confining:
                    units = [scope for scope in self.workqueue if not scope.startswith(CONFINED)]
                if not units and not confining:
                    return
                if units:
                    self.workqueue.move_to_end(units[0], last=False)
            super()._assign_work_unit(node)

    def _worker_number(node: Any) -> int:
        """``gw3`` -> 3 (xdist's names for its workers)."""
        name = str(node.gateway.id)
        return int(name[2:]) if name[2:].isdigit() else 0

    @pytest.hookimpl(tryfirst=True, optionalhook=True)
    def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
        """The scheduler of ``--dist loadfile`` (the Makefile's); xdist's own for the rest."""
        if config.getvalue("dist") != "loadfile":
            return None
        return _SpreadFileScheduling(config, log)

    # When each worker ran out of work, said at the end of the run: a worker that
    # finished long before the other shows the files badly shared out.
    _session_start: list[float] = []
    _worker_done: dict[str, float] = {}

    def pytest_sessionstart(session: pytest.Session) -> None:
        _session_start.append(time.monotonic())

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(node: Any, error: object | None) -> None:
        if _session_start:
            _worker_done[node.gateway.id] = time.monotonic() - _session_start[0]

    def pytest_terminal_summary(terminalreporter: Any) -> None:
        if len(_worker_done) < 2:
            return
        done = sorted(_worker_done.items(), key=lambda item: item[1])
        said = ", ".join(f"{name} after {at:.0f} s" for name, at in done)
        terminalreporter.write_line(
            f"xdist workers done: {said} (the first idle {done[-1][1] - done[0][1]:.0f} s)"
        )


class ZkChroot(NamedTuple):
    """A test's own corner of the shared ZooKeeper server."""

    #: the chroot znode, e.g. ``/t-3f2a...`` (created before the test, deleted after)
    path: str
    #: ``host:port/t-3f2a...``: for ``KazooClient(hosts=...)`` or ``zookeeper.connect``
    connect_string: str
    #: the server's own ``host:port``, without the chroot
    server_connect_string: str


def _skip_without_zookeeper() -> None:
    if not zookeeper_available():
        pytest.skip(
            "ZooKeeper not found (apt-get install zookeeper, or set TRAFKA_ZOOKEEPER_CLASSPATH)"
        )


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """One ZooKeeper server per pytest process (so one per xdist worker).

    Started the first time a test asks for it, stopped at the end of the session;
    tests are skipped when ZooKeeper is not installed. Tests share it, so they
    must neither stop, kill nor restart it (use ``make_zookeeper`` for faults)
    and should keep their znodes under ``zk_chroot``.
    """
    _skip_without_zookeeper()
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    server.start(timeout=60.0)
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def _chroot(zookeeper: ZooKeeperServer) -> Iterator[ZkChroot]:
    """A new empty chroot on the shared server, deleted afterwards (best effort)."""
    from kazoo.client import KazooClient

    if not zookeeper.running:
        # A test broke the rule above; do not let every later test fail for it.
        zookeeper.start(timeout=60.0)
    path = f"/t-{uuid.uuid4().hex}"
    admin = KazooClient(hosts=zookeeper.connect_string, timeout=5.0)
    admin.start(timeout=10.0)
    try:
        admin.create(path)
    finally:
        admin.stop()
        admin.close()
    yield ZkChroot(path, zookeeper.connect_string + path, zookeeper.connect_string)
    if zookeeper.running:
        admin = KazooClient(hosts=zookeeper.connect_string, timeout=5.0)
        try:
            admin.start(timeout=10.0)
            admin.delete(path, recursive=True)
        except Exception:
            pass  # best effort: the server is private to this test session
        finally:
            admin.stop()
            admin.close()


@pytest.fixture
def zk_chroot(zookeeper: ZooKeeperServer) -> Iterator[ZkChroot]:
    """A unique chroot on the shared server (``/t-<uuid>``), created empty and
    deleted after the test, with its connect string ``host:port/t-<uuid>``."""
    with _chroot(zookeeper) as chroot:
        yield chroot


@pytest.fixture(scope="module")
def module_zk(zookeeper: ZooKeeperServer) -> Iterator[str]:
    """The connect string of a chroot of the shared server for a whole test
    module (a cluster its tests share), deleted after the module."""
    with _chroot(zookeeper) as chroot:
        yield chroot.connect_string


@pytest.fixture
def zk(zk_chroot: ZkChroot) -> str:
    """The connect string of this test's ZooKeeper chroot."""
    return str(zk_chroot.connect_string)


@pytest.fixture
def make_zookeeper(tmp_path: Path) -> Iterator[Any]:
    """``make_zookeeper(start=True, **settings) -> ZooKeeperServer``: a private server
    in the test's tmp_path, for tests that stop, kill or restart ZooKeeper (see
    :class:`~trafka.brokerlite.dev.zookeeper_server.ZooKeeperServer` for the settings).
    Every server is stopped after the test; skipped when ZooKeeper is missing."""
    _skip_without_zookeeper()
    servers: list[ZooKeeperServer] = []

    def make(start: bool = True, **settings: Any) -> ZooKeeperServer:
        server = ZooKeeperServer(tmp_path / f"zookeeper-{len(servers)}", **settings)
        servers.append(server)
        if start:
            server.start(timeout=60.0)
        return server

    yield make
    for server in servers:
        server.stop()


# --- Go clients of tests/interop (Debian's Go packages, GOPATH mode) ----------------------


REPO = Path(__file__).resolve().parents[1]
GOPATH = Path("/usr/share/gocode")


@pytest.fixture(scope="session")
def build_go_client(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``build_go_client(name, package, debian_package) -> Path``: the binary of
    ``tests/interop/<name>``, built once per session into a temporary directory.
    Skips when Go or ``package`` (a GOPATH import path) is not installed."""
    import os
    import shutil
    import subprocess

    built: dict[str, Path] = {}

    def build(name: str, package: str, debian_package: str) -> Path:
        go = shutil.which("go")
        if go is None:
            pytest.skip("Go is not installed (make system-deps installs Debian's golang-go)")
        if not (GOPATH / "src" / package).is_dir():
            pytest.skip(f"{package} is not in {GOPATH} (apt-get install {debian_package})")
        if name in built:
            return built[name]
        out = tmp_path_factory.mktemp(name) / name
        env = {**os.environ, "GOPATH": str(GOPATH), "GO111MODULE": "off", "GOFLAGS": ""}
        if "HOME" not in env:
            env["GOCACHE"] = str(out.parent / "cache")
        done = subprocess.run(
            [go, "build", "-o", str(out), "."],
            cwd=REPO / "tests" / "interop" / name,
            env=env,
            capture_output=True,
            text=True,
            timeout=280,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        built[name] = out
        return out

    return build


GO_PEERS = REPO / "tests" / "interop" / "gopeers"


@pytest.fixture(scope="session")
def go_peers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``gopeers`` binary (``tests/interop/gopeers``), built in module mode
    from the committed go.mod and go.sum (``-mod=readonly``: a build never edits
    them) with the user's module and build caches; ``make peers`` downloads the
    modules and builds once, filling Go's build cache (a cold build is minutes
    of CPU; warm, some 5 s). Built once per run: under pytest-xdist the
    first worker builds into the directory all workers' temporary directories
    share while the others wait on a lock. Skips only when Go is missing; a
    failed build (no module proxy, a module missing) fails the test with Go's
    message."""
    import fcntl
    import shutil
    import subprocess

    go = shutil.which("go")
    if go is None:
        pytest.skip("Go is not installed (make system-deps installs Debian's golang-go)")
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    binary = shared / "gopeers" / "gopeers"
    with open(shared / "gopeers.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not binary.is_file():
            env = {**os.environ, "GO111MODULE": "on", "GOFLAGS": "-mod=readonly -buildvcs=false"}
            if "HOME" not in env:
                env["GOCACHE"] = str(shared / "gopeers-cache")
                env["GOMODCACHE"] = str(shared / "gopeers-mod")
            done = subprocess.run(
                [go, "build", "-o", str(binary), "."],
                cwd=GO_PEERS,
                env=env,
                capture_output=True,
                text=True,
                timeout=500,
                check=False,
            )
            assert done.returncode == 0, f"go build of {GO_PEERS} failed:\n{done.stderr}"
    return binary


KAFKAJS = "kafkajs@2.2.4"


@pytest.fixture(scope="session")
def kafkajs(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """``[node, client.js]``: tests/interop/kafkajs/client.js with npm's kafkajs
    installed beside a copy of it; skips when node or npm is missing or the
    install fails (no registry).

    Installed once per run: under pytest-xdist, in the directory all workers'
    temporary directories share, the first worker that needs it installing
    while the others wait on a lock (``npm install`` took 3.5-12.6 s, mostly
    the registry's answers, in each worker that ran a kafkajs test)."""
    import fcntl
    import shutil
    import subprocess

    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are needed for kafkajs (apt-get install nodejs npm)")
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    home = shared / "kafkajs"
    with open(shared / "kafkajs.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (home / "installed").is_file():
            home.mkdir(exist_ok=True)
            shutil.copy(REPO / "tests" / "interop" / "kafkajs" / "client.js", home / "client.js")
            done = subprocess.run(
                [
                    npm,
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--silent",
                    "--prefix",
                    str(home),
                    KAFKAJS,
                ],
                capture_output=True,
                text=True,
                timeout=240,
                check=False,
            )
            if done.returncode != 0:
                pytest.skip(f"npm install {KAFKAJS} failed: {done.stderr[-500:]}")
            (home / "installed").touch()
    return [node, str(home / "client.js")]
