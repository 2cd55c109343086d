"""A service's code type-checks against the SDK as shipped (``py.typed``), with
mypy --strict: records are typed by the deserializer functions given to the
consumer (``ConsumerRecord[K, V]``), ``Any`` without them, for open_consumer,
start_consumer and the blocking Consumer; a wrong use of a record's key or
value is an error. ``isinstance(record, PartitionEOF)`` (``enable.partition.eof``)
narrows a record to the end-of-partition event, and the rest back to the record."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("codec", "sdk")

SERVICE = """
from dataclasses import dataclass

from trafka.sdk import PartitionEOF, start_consumer
from trafka.sdk.blocking import Consumer
from trafka.sdk.consumer import open_consumer


@dataclass
class Order:
    amount: int


def order(data: bytes | None) -> Order:
    return Order(len(data or b""))


def customer(data: bytes | None) -> str:
    return (data or b"").decode()


async def service() -> None:
    async with open_consumer(
        "orders", group_id="g", key_deserializer=customer, value_deserializer=order
    ) as consumer:
        async for record in consumer:
            reveal_type(record.key)
            reveal_type(record.value)
            total: int = record.value.amount
            wrong: int = record.key  # E
    async with open_consumer("orders", group_id="g") as plain:
        reveal_type((await plain.getone()).value)
    started = await start_consumer("orders", group_id="g", value_deserializer=order)
    reveal_type(started)
    await started.stop()


def blocking() -> None:
    with Consumer("orders", group_id="g", key_deserializer=customer) as consumer:
        for record in consumer:
            reveal_type(record)


def to_the_end() -> None:
    with Consumer("orders", value_deserializer=order, enable_partition_eof=True) as consumer:
        for item in consumer:
            if isinstance(item, PartitionEOF):
                reveal_type(item)  # the end
                end: int = item.offset
                continue
            reveal_type(item.value)  # the rest
"""


def test_records_are_typed_by_their_deserializers(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    tree = tmp_path / "src" / "trafka"
    tree.mkdir(parents=True)
    for name in PACKAGES:
        (tree / name).symlink_to(ROOT / name)
    service = tmp_path / "service.py"
    service.write_text(textwrap.dedent(SERVICE))
    run = subprocess.run(
        [
            sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
            "--cache-dir", str(tmp_path / "cache"), "--no-error-summary", str(service),
        ],
        cwd=tmp_path, env={**os.environ, "MYPYPATH": str(tmp_path / "src")},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    lines = [line.split(":", 2)[1:] for line in run.stdout.splitlines() if ":" in line]
    said = {int(n): text.strip() for n, text in lines if n.isdigit()}
    source = service.read_text().splitlines()

    def at(fragment: str) -> str:
        number = next(i for i, line in enumerate(source, 1) if fragment in line)
        return said.get(number, "")

    assert at("reveal_type(record.key)").endswith('Revealed type is "str"'), said
    assert "service.Order" in at("reveal_type(record.value)")
    assert 'Revealed type is "Any"' in at("reveal_type((await plain.getone()).value)")
    assert "Consumer[Any, service.Order]" in at("reveal_type(started)")
    assert "ConsumerRecord[str, Any]" in at("reveal_type(record)"), said
    assert "fallback=trafka.sdk.consumer_types.PartitionEOF]" in at("# the end"), said
    assert "service.Order" in at("# the rest"), said
    # The only error: the key (a str) used as an int.
    errors = [(n, text) for n, text in said.items() if "error:" in text]
    assert errors == [(source.index(next(s for s in source if "# E" in s)) + 1, errors[0][1])]
    assert "Incompatible types in assignment" in errors[0][1]
