"""The producer's value types that hooks see (interceptors, tracing): a leaf
that imports nothing stateful, so both can name them without importing each
other."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["ProducerRecord"]


@dataclasses.dataclass(frozen=True, slots=True)
class ProducerRecord:
    """A record as ``send()`` was given it, for ``on_send``: its arguments,
    unchecked and not serialized yet (``partition`` and ``timestamp_ms``
    None when left to the producer)."""

    topic: str
    value: Any = None
    key: Any = None
    partition: int | None = None
    headers: Sequence[tuple[str, Any]] | Mapping[str, Any] | None = None
    timestamp_ms: int | None = None

    def send_args(self) -> tuple[str, Any, Any, int | None, Any, int | None]:
        """``(topic, value, key, partition, headers, timestamp_ms)``, as
        :meth:`~trafka.sdk.producer_core.ProducerCore.prepare` takes them."""
        return self.topic, self.value, self.key, self.partition, self.headers, self.timestamp_ms
