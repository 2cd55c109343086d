"""The share consumer's settings (KIP-932): :class:`ShareConsumerConfig`.

The rules of every client's settings are the package's (:mod:`trafka.sdk.config`), where
``trafka.sdk.config.ShareConsumerConfig`` loads this module when first named:
a program that never opens a share consumer does not make its dataclass (issue #48).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .._validate import INT32_MAX
from ..errors import ConfigError
from .client import ClientConfig
from .consumer import ConsumerConfig
from .keys import _NOT_FOR_SHARE_GROUPS, _names, _norm
from .values import _SERDES, _bool, _callable_or_name, _choice, _field, _int, _opt_str

__all__ = ["ShareConsumerConfig"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ShareConsumerConfig(ClientConfig):
    """Share consumer settings (KIP-932; plus the connection settings of :class:`ClientConfig`).

    Attributes:
        group_id: the share group (required: a share consumer without one is an error).
        share_acknowledgement_mode: ``implicit`` (the default: the records of a
            poll are accepted when the next poll, commit or close starts) or
            ``explicit`` (the application acknowledges every record).
        share_acquire_mode: ``batch_optimized`` (the default: brokers acquire
            whole record batches, so a fetch may bring more than
            ``max_poll_records``; those wait for the next poll, their locks
            running) or ``record_limit`` (KIP-1206, brokers of Kafka 4.2+: a
            fetch acquires at most ``max_poll_records`` records).
        max_poll_records: records handed out per poll; also the ShareFetch
            MaxRecords and BatchSize.
        max_poll_interval_ms: a member that does not poll for this long leaves
            the group, and joins again at its next poll.
        fetch_min_bytes: a ShareFetch waits until brokers have this much data
            (or ``fetch_max_wait_ms`` passed).
        fetch_max_wait_ms: how long a broker may hold a ShareFetch waiting for
            ``fetch_min_bytes``.
        fetch_max_bytes: the most data a ShareFetch response may carry.
        check_crcs: verify record batch CRCs (a corrupt batch's records are rejected).
        default_api_timeout_ms: the bound of ``commit()`` without its own timeout.
        allow_auto_create_topics: metadata requests may create subscribed topics.
        key_deserializer / value_deserializer: ``bytes``, ``str``, ``json`` or a callable.
    """

    group_id: str | None = _field(None, _opt_str)
    share_acknowledgement_mode: str = _field("implicit", _choice("implicit", "explicit"))
    share_acquire_mode: str = _field("batch_optimized", _choice("batch_optimized", "record_limit"))
    max_poll_records: int = _field(500, _int(1, INT32_MAX))
    max_poll_interval_ms: int = _field(300_000, _int(1, INT32_MAX))
    fetch_min_bytes: int = _field(1, _int(0, INT32_MAX))
    fetch_max_wait_ms: int = _field(500, _int(0, INT32_MAX), aliases=("fetch.wait.max.ms",))
    fetch_max_bytes: int = _field(52_428_800, _int(0, INT32_MAX))
    check_crcs: bool = _field(True, _bool)
    default_api_timeout_ms: int = _field(60_000, _int(0, INT32_MAX))
    allow_auto_create_topics: bool = _field(True, _bool)
    key_deserializer: Any = _field("bytes", _callable_or_name(*_SERDES))  # noqa: RUF009
    value_deserializer: Any = _field("bytes", _callable_or_name(*_SERDES))  # noqa: RUF009

    def _check(self) -> None:
        super(ShareConsumerConfig, self)._check()
        if self.group_id is None:
            raise ConfigError("a share consumer needs group.id (the share group to join)")

    @classmethod
    def _refusal(cls, key: str) -> str | None:
        why = _NOT_FOR_SHARE_GROUPS.get(_names(ConsumerConfig).get(_norm(key), ""))
        return None if why is None else f"{key!r} is not a share consumer setting: {why}"

    @property
    def explicit_acknowledgement(self) -> bool:
        """Whether the application acknowledges each record (``share.acknowledgement.mode``)."""
        return self.share_acknowledgement_mode == "explicit"
