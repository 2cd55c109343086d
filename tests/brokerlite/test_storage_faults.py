"""Storage failures, through the sans-IO broker: a full disk fails Produce with
KAFKA_STORAGE_ERROR and a warning naming the partition, the file and the OS
error (once a minute at most); a write that cannot be undone takes the
partition offline with an error; AlterReplicaLogDirs to the partition's own
directory brings it back after a check, as a restart would; and
``verify_data_dir`` finds a damaged batch in a sealed segment, which the broker
serves unchecked (as Kafka).

Write failures are simulated through ``segment._write`` and
``segment._ftruncate``, the indirections every segment write goes through.
"""

from __future__ import annotations

import errno
import logging
from typing import Any

import pytest
from brokerlite_wire import batch, create, read, send

from trafka.brokerlite.handlers._util import log_dir_path
from trafka.brokerlite.storage import segment as segment_module
from trafka.brokerlite.storage.verify import verify_data_dir
from trafka.codec.errors import DecodeError, ErrorCode
from trafka.codec.messages import k34_alter_replica_log_dirs as alter_dirs
from trafka.codec.records import decode_records

SEGMENT = f"{0:020d}.log"
REAL_WRITE = segment_module._write


def full_disk(fd: int, data: Any) -> int:
    """Half the data goes, then the disk is full (a torn write)."""
    REAL_WRITE(fd, memoryview(data)[: len(data) // 2])
    raise OSError(errno.ENOSPC, "No space left on device")


def broken_disk(fd: int, length: int) -> None:
    raise OSError(errno.EIO, "Input/output error")


def storage_lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "trafka.brokerlite.log" and r.levelno == level
    ]


def reopen(core: Any, topic: str) -> int:
    """AlterReplicaLogDirs of partition 0 to the directory it is in: its error code."""
    Request = alter_dirs.AlterReplicaLogDirsRequest
    body = Request(
        dirs=[
            Request.AlterReplicaLogDir(
                path=log_dir_path(core.broker),
                topics=[Request.AlterReplicaLogDirTopic(name=topic, partitions=[0])],
            )
        ]
    )
    [result] = core.call(34, 2, body).results
    return int(result.partitions[0].error_code)


def started(core: Any, topic: str, caplog: pytest.LogCaptureFixture) -> None:
    """``topic`` with one record at offset 0, its storage lines captured."""
    caplog.set_level(logging.WARNING, logger="trafka.brokerlite.log")
    create(core, topic)
    assert send(core, topic, batch(core, [b"a"])).error_code == 0


def values(core: Any, topic: str) -> list[bytes | None]:
    return [r.value for r in decode_records(read(core, topic).records or b"")]


def test_a_full_disk_fails_produce_with_one_warning_a_minute(
    core: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    started(core, "full", caplog)
    monkeypatch.setattr(segment_module, "_write", full_disk)
    for _ in range(3):
        failed = send(core, "full", batch(core, [b"b" * 100]))
        assert failed.error_code == ErrorCode.KAFKA_STORAGE_ERROR
    [line] = storage_lines(caplog, logging.WARNING)
    assert "full-0" in line and f"full-0/{SEGMENT}" in line
    assert "No space left on device" in line and "KAFKA_STORAGE_ERROR" in line
    monkeypatch.setattr(segment_module, "_write", REAL_WRITE)
    assert send(core, "full", batch(core, [b"c"])).base_offset == 1
    assert values(core, "full") == [b"a", b"c"]


def test_an_offline_partition_comes_back_after_a_check(
    core: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    started(core, "torn", caplog)
    # The write tears and cannot be undone: the partition goes offline, loudly.
    monkeypatch.setattr(segment_module, "_write", full_disk)
    monkeypatch.setattr(segment_module, "_ftruncate", broken_disk)
    failed = send(core, "torn", batch(core, [b"b" * 100]))
    assert failed.error_code == ErrorCode.KAFKA_STORAGE_ERROR
    [line] = storage_lines(caplog, logging.ERROR)
    assert "torn-0 is OFFLINE" in line and SEGMENT in line
    assert "No space left on device" in line and "Input/output error" in line
    assert "trafka log-dirs reopen" in line
    # Still offline once the disk is fine: as Kafka, until a restart or an operator.
    monkeypatch.undo()
    assert send(core, "torn", batch(core, [b"c"])).error_code == ErrorCode.KAFKA_STORAGE_ERROR
    # The check refuses while the directory still cannot take a write...
    monkeypatch.setattr(segment_module, "_write", full_disk)
    assert reopen(core, "torn") == ErrorCode.KAFKA_STORAGE_ERROR
    assert core.broker.logs.partition("torn", 0).offline is not None
    # ... and brings it back when it can: the torn tail is cut, as a restart would.
    monkeypatch.setattr(segment_module, "_write", REAL_WRITE)
    assert reopen(core, "torn") == ErrorCode.NONE
    assert core.broker.logs.partition("torn", 0).offline is None
    assert send(core, "torn", batch(core, [b"d"])).base_offset == 1
    assert values(core, "torn") == [b"a", b"d"]
    assert reopen(core, "torn") == ErrorCode.NONE  # online: nothing to do


def test_verify_finds_a_damaged_batch_that_the_broker_serves(core: Any) -> None:
    create(core, "rot", **{"segment.bytes": "100"})  # a batch a segment
    for value in (b"one", b"two", b"three"):
        assert send(core, "rot", batch(core, [value])).error_code == 0
    data_dir = core.broker.logs.data_dir
    assert not verify_data_dir(data_dir).damaged
    # Flip a byte of the second batch's value, in a sealed segment.
    sealed = sorted((data_dir / "rot-0").glob("*.log"))[1]
    raw = bytearray(sealed.read_bytes())
    at = raw.index(b"two")
    raw[at] ^= 0xFF
    sealed.write_bytes(bytes(raw))
    report = verify_data_dir(data_dir, ["rot"])
    [damage] = report.damaged
    assert (damage.path, damage.position, damage.base_offset) == (sealed, 0, 1)
    assert damage.problem == "CRC mismatch"
    assert report.partitions == 1 and report.batches == 3
    # The broker serves it as it is; the consumer's CRC check is what catches it.
    served = read(core, "rot", offset=1).records
    assert served is not None and served.startswith(bytes(raw))
    with pytest.raises(DecodeError, match="CRC"):
        list(decode_records(served))
