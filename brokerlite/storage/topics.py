"""Topics' names and ids, and what the registry records of a topic.

Rules (Kafka's):

* A name is 1-249 characters of ``[a-zA-Z0-9._-]``, neither ``.`` nor ``..``.
* No two names may differ only by ``.`` against ``_`` (their metric names
  would be the same).
* A topic id is random, never zero, and never one whose base64 form starts with
  ``-``.
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from collections.abc import Iterable

from ..errors import (
    InvalidTopicError,
)

__all__ = ["TopicInfo", "check_topic_collision", "new_topic_id", "validate_topic_name"]

# -- topic registry -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic as the registry records it.

    Attributes:
        name: the topic's name.
        topic_id: its id (random, never zero).
        num_partitions: how many partitions it has.
        configs: its config overrides (Kafka names, normalised values); treat as read-only.
    """

    name: str
    topic_id: uuid.UUID
    num_partitions: int
    configs: dict[str, str]


_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
_MAX_TOPIC_LENGTH = 249


def validate_topic_name(name: str) -> None:
    """Check Kafka's topic naming rules.

    Raises:
        InvalidTopicError: empty, ``.`` or ``..``, longer than 249 characters, or a
            character other than ASCII letters, digits, ``.``, ``_`` and ``-``.
    """
    if not isinstance(name, str) or not name:
        raise InvalidTopicError("the topic name is empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"the topic name cannot be {name!r}")
    if len(name) > _MAX_TOPIC_LENGTH:
        raise InvalidTopicError(
            f"the topic name is {len(name)} characters long; the maximum is {_MAX_TOPIC_LENGTH}"
        )
    if not _LEGAL_TOPIC.fullmatch(name):
        raise InvalidTopicError(
            f"the topic name {name!r} has characters other than ASCII letters, digits, '.', '_', '-'"
        )


def check_topic_collision(name: str, existing: Iterable[str]) -> None:
    """Kafka's rule that no two topics may differ only by '.' against '_' (their
    metric names would be the same).

    Raises:
        InvalidTopicError: ``name`` collides with one of ``existing`` (itself aside).
    """
    folded = name.replace(".", "_")
    for other in existing:
        if other != name and other.replace(".", "_") == folded:
            raise InvalidTopicError(f"topic {name!r} collides with existing topic {other!r}")


def new_topic_id() -> uuid.UUID:
    """A random topic id, as Kafka makes them (see the comment)."""
    # Like Kafka: never the zero id, and never one whose base64 form starts with
    # '-' (which command-line tools would read as an option).
    import base64

    while True:
        topic_id = uuid.uuid4()
        if not base64.urlsafe_b64encode(topic_id.bytes).startswith(b"-"):
            return topic_id


def topic_exists(name: str) -> str:
    """The message of TOPIC_ALREADY_EXISTS, in Kafka's words (kafka-topics prints it)."""
    return f"Topic '{name}' already exists."


def partitions_not_grown(current: int, requested: object) -> str:
    """The message of INVALID_PARTITIONS for a count that is not larger, in Kafka's
    words (ZooKeeper-mode Kafka's ``ZkAdminManager.createPartitions``)."""
    if requested == current:
        return f"Topic already has {current} partitions."
    return (
        f"Topic currently has {current} partitions, which is higher than the requested {requested}."
    )
