"""``trafka log verify`` on a data directory with a deliberately damaged segment,
and ``trafka log-dirs reopen`` bringing an offline partition back online."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner

from trafka.brokerlite import RunningBroker, broker_in_thread
from trafka.brokerlite.storage import segment as segment_module
from trafka.sdk import NewTopic, open_admin, open_producer
from trafka.tools.cli import main

pytestmark = pytest.mark.timeout(120)


def fill(running: RunningBroker, topic: str, values: list[bytes], **configs: str) -> None:
    async def go() -> None:
        bs = running.bootstrap_servers
        async with open_admin(bootstrap_servers=bs) as admin:
            await admin.create_topics([NewTopic(topic, 1, configs=configs)])
        async with open_producer(bootstrap_servers=bs) as producer:
            for value in values:
                await producer.send_and_wait(topic, value, partition=0)

    anyio.run(go)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stopped broker's data: topic ``rot`` (a batch a segment, the second one
    damaged) and topic ``fine``."""
    data = tmp_path_factory.mktemp("verify") / "data"
    with broker_in_thread(port=0, data_dir=data) as running:
        fill(running, "rot", [b"one", b"two", b"three"], **{"segment.bytes": "100"})
        fill(running, "fine", [b"x"])
    [damaged] = [p for p in (data / "rot-0").glob("*.log") if b"two" in p.read_bytes()]
    raw = bytearray(damaged.read_bytes())
    raw[raw.index(b"two")] ^= 0xFF
    damaged.write_bytes(bytes(raw))
    return data


def test_verify_reports_the_damaged_batch_and_fails(data_dir: Path) -> None:
    result = CliRunner().invoke(main, ["log", "verify", str(data_dir)])
    assert result.exit_code == 1, result.output
    [line] = result.stdout.splitlines()
    assert line == f"{data_dir / 'rot-0' / f'{1:020d}.log'}:0: CRC mismatch (batch at offset 1)"
    assert "2 partition(s), 4 segment(s), 4 batch(es)" in result.stderr
    assert "1 damaged" in result.stderr


def test_verify_one_topic(data_dir: Path) -> None:
    result = CliRunner().invoke(main, ["log", "verify", str(data_dir), "--topic", "fine"])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert "1 partition(s), 1 segment(s), 1 batch(es)" in result.stderr
    assert "all sound" in result.stderr
    missing = CliRunner().invoke(main, ["log", "verify", str(data_dir), "--topic", "nope"])
    assert missing.exit_code == 1 and "no partition of topic 'nope'" in missing.output


def test_reopen_brings_an_offline_partition_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with broker_in_thread(port=0, data_dir=tmp_path / "data") as running:
        fill(running, "held", [b"a"])
        plog = running.broker.logs.partition("held", 0)
        plog._offline = "a failed write could not be undone (simulated)"

        def reopen() -> Any:
            args = ["log-dirs", "reopen", "held", "0", "1", "-b", running.bootstrap_servers]
            return CliRunner().invoke(main, args)

        def enospc(fd: int, data: Any) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(segment_module, "_write", enospc)
        refused = reopen()
        assert refused.exit_code == 1 and "KAFKA_STORAGE_ERROR" in refused.output
        monkeypatch.undo()
        done = reopen()
        assert done.exit_code == 0, done.output
        assert "held-0 on broker 1 is online" in done.stderr
        assert running.broker.logs.partition("held", 0).offline is None
        fill_more = CliRunner().invoke(
            main, ["produce", "held", "-b", running.bootstrap_servers], input="b\n"
        )
        assert fill_more.exit_code == 0, fill_more.output
