"""What the share-partitions need of a share group's configuration (KIP-932):
the port through which the fetcher reads the group coordinator's
``share.*`` and ``errors.deadletterqueue.*`` group configs, and Kafka's
defaults for a broker without one."""

from __future__ import annotations

import dataclasses
from typing import Protocol

__all__ = ["DefaultShareConfig", "ShareConfig"]


class ShareConfig(Protocol):
    """What a share-partition needs of its group's configuration."""

    @property
    def auto_offset_reset(self) -> str: ...

    @property
    def record_lock_duration_ms(self) -> int: ...

    @property
    def delivery_count_limit(self) -> int: ...

    @property
    def isolation_level(self) -> str: ...

    @property
    def partition_max_record_locks(self) -> int: ...

    @property
    def renew_acknowledge_enable(self) -> bool: ...

    @property
    def dlq_topic(self) -> str: ...

    @property
    def dlq_copy_record(self) -> bool: ...


@dataclasses.dataclass(frozen=True, slots=True)
class DefaultShareConfig:
    """Kafka's defaults, for a broker without a share-group coordinator config."""

    auto_offset_reset: str = "latest"
    record_lock_duration_ms: int = 30_000
    delivery_count_limit: int = 5
    isolation_level: str = "read_uncommitted"
    partition_max_record_locks: int = 2000
    renew_acknowledge_enable: bool = True
    dlq_topic: str = ""
    dlq_copy_record: bool = False
