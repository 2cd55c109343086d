"""The consumer's subscription: topics, a pattern, or a manual assignment,
without I/O.

Rules:

* A consumer either assigns its partitions itself (``assign()``) or
  subscribes (``subscribe()``, with a ``group.id``: the group assigns them);
  never both.
* A subscription is to topic names or to one regular expression, not both.
  Subscribing again replaces it. Topic names are tracked in the metadata
  cache; a pattern tracks every topic and matches their names as metadata
  comes (internal topics left out with ``exclude.internal.topics``).
"""

from __future__ import annotations

import re
from typing import Any

from ._validate import check_callable, check_str, check_topics, describe
from .errors import ArgumentTypeError, ArgumentValueError, UsageError
from .metadata import MetadataCache

__all__ = ["Subscription", "check_subscription"]

_LISTENER_METHODS = ("on_partitions_revoked", "on_partitions_assigned", "on_partitions_lost")


def check_subscription(
    topics: Any, pattern: Any, listener: Any
) -> tuple[list[str] | None, str | re.Pattern[str] | None]:
    """``subscribe()``'s arguments, checked (pure: the blocking consumer checks
    them in the caller's thread too)."""
    checked = None if topics is None else check_topics("topics", topics)
    if pattern is not None and not isinstance(pattern, re.Pattern):
        check_str("pattern", pattern)
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ArgumentValueError(f"pattern is not a regular expression: {exc}") from None
    if listener is not None:
        found = [getattr(listener, name, None) for name in _LISTENER_METHODS]
        if not any(fn is not None for fn in found):
            raise ArgumentTypeError(
                "listener must have on_partitions_revoked / on_partitions_assigned "
                f"(and optionally on_partitions_lost), got {describe(listener)}"
            )
        for name, fn in zip(_LISTENER_METHODS, found, strict=True):
            if fn is not None:
                check_callable(f"listener.{name}", fn)
    return checked, pattern


class Subscription:
    """What a consumer consumes: assigned partitions, topics or a pattern (see the module doc).

    Attributes:
        manual: the consumer assigns its partitions itself.
        topics: the subscribed topic names (empty with a pattern).
        pattern: the subscribed regular expression, if it is one.
    """

    __slots__ = ("manual", "pattern", "topics")

    def __init__(self) -> None:
        self.manual = False
        self.topics: set[str] = set()
        self.pattern: re.Pattern[str] | None = None

    def clear(self, metadata: MetadataCache) -> None:
        """Neither subscribed nor assigning: ``unsubscribe()``."""
        self.manual = False
        self.topics = set()
        if self.pattern is not None:
            self.pattern = None
            metadata.track_all_topics(False)

    def assign(self) -> None:
        """The consumer assigns its partitions itself.

        Raises:
            UsageError: it is subscribed.
        """
        if self.topics or self.pattern is not None:
            raise UsageError("assign() cannot be mixed with subscribe()")
        self.manual = True

    def subscribe(
        self,
        topics: list[str] | None,
        pattern: str | re.Pattern[str] | None,
        group_id: str | None,
        metadata: MetadataCache,
    ) -> None:
        """Subscribe to ``topics`` or ``pattern`` (checked by
        :func:`check_subscription`), tracked in ``metadata``.

        Raises:
            UsageError: no ``group_id``, the consumer assigns its partitions
                itself, or both or neither of ``topics`` and ``pattern``.
        """
        if self.manual:
            raise UsageError("subscribe() cannot be mixed with assign()")
        if group_id is None:
            raise UsageError("subscribe() needs a group.id; use assign() without a group")
        if (topics is None) == (pattern is None):
            raise UsageError("give either topics or pattern")
        if pattern is not None:
            self.pattern = re.compile(pattern) if isinstance(pattern, str) else pattern
            self.topics = set()
            metadata.track_all_topics(True)
        else:
            self.pattern = None
            self.topics = set(topics or ())
            metadata.track_all_topics(False)
            metadata.set_topics(self.topics)

    def matching(self, metadata: MetadataCache, exclude_internal: bool) -> set[str]:
        """The topics the subscription covers now (a pattern's matches in ``metadata``)."""
        if self.pattern is None:
            return set(self.topics)
        return {
            t
            for t, info in metadata.topics.items()
            if self.pattern.fullmatch(t) and not (info.is_internal and exclude_internal)
        }
