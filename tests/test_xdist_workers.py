"""What tests/conftest.py does for its xdist workers: the first two stop
CONFINED's session peers (the three-node Kafka clusters, Spark's session) when
they go on to other files, and only then (tests/released_peers.py); the
bytecode they all need is written once before they start."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import released_peers

CONFTEST = Path(__file__).resolve().parent / "conftest.py"


@pytest.fixture
def conftest(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """tests/conftest.py with two confining workers (TRAFKA_CONFINED_WORKERS=2;
    the default is one), the case that shows both the first workers and the
    others, whatever this run's setting."""
    module = request.config.pluginmanager.get_plugin(str(CONFTEST))
    assert isinstance(module, ModuleType)
    monkeypatch.setattr(module, "CONFINED_WORKERS", 2)
    return module


@pytest.fixture
def peers(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """A clean registry (this worker's real one set aside), and the stops made."""
    monkeypatch.setattr(released_peers, "_held", {})
    monkeypatch.setattr(released_peers, "_released", set())
    stopped: list[str] = []
    for name in ("kafka4_cluster", "spark"):
        released_peers.hold(name, lambda name=name: stopped.append(name))  # type: ignore[misc]
    yield stopped


def _item(nodeid: str, fixtures: tuple[str, ...], worker: str | None, workers: int) -> Any:
    config = SimpleNamespace()
    if worker is not None:
        config.workerinput = {"workerid": worker, "workercount": workers}
    path = CONFTEST.parent.parent / nodeid.split("::")[0]
    return SimpleNamespace(nodeid=nodeid, fixturenames=fixtures, config=config, path=path)


def test_release_stops_each_held_peer_once(peers: list[str]) -> None:
    assert released_peers.release() == ["kafka4_cluster", "spark"]
    assert released_peers.release() == []
    released_peers.drop("spark")  # the fixture's own teardown, later: nothing more
    assert peers == ["kafka4_cluster", "spark"]
    assert released_peers.released() == {"kafka4_cluster", "spark"}


def test_a_peer_ended_by_its_teardown_is_not_released(peers: list[str]) -> None:
    released_peers.drop("kafka4_cluster")
    assert released_peers.release() == ["spark"]
    assert peers == ["spark"]


@pytest.mark.parametrize(
    ("worker", "workers", "stops"),
    [("gw0", 3, True), ("gw1", 3, True), ("gw2", 3, False), ("gw0", 2, False), (None, 0, False)],
)
def test_a_first_worker_stops_them_at_its_first_test_from_outside(
    conftest: ModuleType, peers: list[str], worker: str | None, workers: int, stops: bool
) -> None:
    confined = _item("tests/spark/test_spark_source.py::t", ("spark",), worker, workers)
    conftest.pytest_runtest_setup(confined)
    assert peers == []
    other = _item("tests/codec/test_crc.py::t", (), worker, workers)
    conftest.pytest_runtest_setup(other)
    assert peers == (["kafka4_cluster", "spark"] if stops else [])


def test_confined_work_after_the_release_fails_saying_why(
    conftest: ModuleType, peers: list[str]
) -> None:
    conftest.pytest_runtest_setup(_item("tests/codec/test_crc.py::t", (), "gw0", 3))
    late = _item("tests/tools/test_cli_kafka.py::t", ("kafka_cluster",), "gw0", 3)
    with pytest.raises(pytest.fail.Exception, match=r"kafka4_cluster.*stopped"):
        conftest.pytest_runtest_setup(late)
    conftest.pytest_runtest_setup(_item("tests/tools/test_cli_kafka.py::u", ("kafka",), "gw0", 3))


def test_only_confined_files_may_use_those_fixtures(conftest: ModuleType) -> None:
    conftest._check_confined([_item("tests/spark/test_spark_source.py::t", ("spark",), None, 0)])
    stray = _item("tests/codec/test_crc.py::t", ("kafka3_cluster",), None, 0)
    with pytest.raises(pytest.UsageError, match="test_crc"):
        conftest._check_confined([stray])


def test_a_file_asking_for_them_by_name_is_found(
    conftest: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """tests/proxy/test_proxy_ha.py asks for a cluster by name (getfixturevalue):
    outside CONFINED, its tests ran on a released cluster."""
    asking = tmp_path / "test_asking.py"
    # (split, or this file would be one asking)
    asking.write_text(
        'def test_t(request):\n    request.getfixturevalue(f"kafka{4}' + '_cluster")\n'
    )
    item = _item("tests/proxy/test_asking.py::test_t", ("request",), None, 0)
    item.path = asking
    with pytest.raises(pytest.UsageError, match="test_asking"):
        conftest._check_confined([item])
    monkeypatch.setattr(conftest, "CONFINED", (*conftest.CONFINED, "tests/proxy/test_asking.py"))
    conftest._check_confined([item])


def test_the_workers_bytecode_is_written_before_they_start(
    conftest: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tests/conftest.py's ``_warm_bytecode``: the test modules' rewritten bytecode
    is in the run's cache before xdist's workers collect them."""
    project = tmp_path / "project"
    (project / "tests").mkdir(parents=True)
    names = [f"test_m{i}.py" for i in range(conftest._WARM_FROM_FILES)]
    for name in names:
        (project / "tests" / name).write_text("def test_t():\n    assert 1 + 1 == 2\n")
    cache = tmp_path / "cache"
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", str(cache))
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    monkeypatch.delenv(conftest._WARMING_ENV, raising=False)
    config = SimpleNamespace(getoption=lambda *_: 3, args=["tests"], rootpath=project)
    conftest._warm_bytecode(config)
    written = {path.name.split(".")[0] + ".py" for path in cache.rglob("test_m*.pyc")}
    assert written == set(names)

    shutil.rmtree(cache)
    config.getoption = lambda *_: None  # no xdist workers: nothing to warm
    conftest._warm_bytecode(config)
    assert not cache.exists()
