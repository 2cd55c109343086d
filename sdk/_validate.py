"""Argument checks for the SDK's public calls: misuse is refused at the call.

Rules:

* A check raises :class:`~.errors.ArgumentTypeError` (a ``TypeError``) for a
  value of the wrong type and :class:`~.errors.ArgumentValueError` (a
  ``ValueError``) for a value of the right type out of range; the message
  starts with the argument's name as the caller wrote it (``timestamp_ms must
  be ...``, ``offsets[TopicPartition(topic='t', partition=0)] must be ...``).
* Checks run before anything is queued, sent or changed, so a refused call
  leaves the client as it was. A bad argument must never reach a background
  task: there it could only fail other records or stop the client.
* ``bool`` is not an integer here (``partition=True`` is a mistake, not 1),
  and an iterable of names is never a single string (``delete_topics("orders")``
  would otherwise mean the topics ``o``, ``r``, ``d``...).
* Bounds are the protocol's: a value that cannot be encoded in its field is
  refused here rather than failing to encode later, out of the caller's sight.
* The checks are pure (no I/O, no event loop, no client state), so the
  blocking clients run them in the caller's thread and raise the same errors
  there as the async clients.
"""

from __future__ import annotations

import math
import numbers
import operator
import re
import reprlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .consumer_types import TopicPartition
from .errors import ArgumentTypeError, ArgumentValueError

__all__ = [
    "INT16_MAX",
    "INT32_MAX",
    "INT64_MAX",
    "check_bool",
    "check_callable",
    "check_committed_offset",
    "check_group_id",
    "check_group_ids",
    "check_headers",
    "check_instance",
    "check_instances",
    "check_int",
    "check_names",
    "check_offset",
    "check_offsets",
    "check_partition",
    "check_str",
    "check_timeout",
    "check_timestamp_ms",
    "check_topic",
    "check_topic_partition",
    "check_topic_partitions",
    "check_topics",
    "describe",
]

INT16_MAX = 2**15 - 1
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

# Kafka's own rule for topic names (org.apache.kafka.common.internals.Topic):
# 1-249 of these characters, and neither "." nor "..". Any other name can never
# exist, so it is refused at the call (it would also be sent, and maybe fail to
# encode, in every metadata refresh of a background task).
_TOPIC_CHARS = re.compile(r"[a-zA-Z0-9._-]+")
_TOPIC_MAX = 249

_short = reprlib.Repr()
_short.maxstring = 60
_short.maxother = 60


def describe(value: Any) -> str:
    """``value`` for an error message: its repr, cut short, and its type."""
    return f"{_short.repr(value)} ({type(value).__name__})"


def _as_int(value: Any) -> int | None:
    """``value`` as a plain int when it is an integer (an ``int``, or what
    ``operator.index`` takes, such as numpy's), else None; never a bool."""
    if isinstance(value, bool):
        return None
    if type(value) is int:
        return value
    try:
        return operator.index(value)
    except TypeError:
        return None


def check_int(
    name: str, value: Any, *, minimum: int | None = None, maximum: int | None = INT32_MAX
) -> int:
    """``value`` as a plain ``int`` within ``[minimum, maximum]`` (``None``:
    unbounded). Integers of other types (numpy's) are taken as their value."""
    number = _as_int(value)
    if number is None:
        raise ArgumentTypeError(f"{name} must be an int, got {describe(value)}")
    if minimum is not None and number < minimum:
        raise ArgumentValueError(f"{name} must be >= {minimum}, got {number}")
    if maximum is not None and number > maximum:
        raise ArgumentValueError(f"{name} must be <= {maximum}, got {number}")
    return number


def check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ArgumentTypeError(f"{name} must be True or False, got {describe(value)}")
    return value


def check_str(
    name: str, value: Any, *, empty: bool = False, none: bool = False, max_len: int = INT16_MAX
) -> Any:
    """A ``str`` (``None`` too when ``none``), non-empty unless ``empty``, that
    encodes as a protocol string (UTF-8, at most ``max_len`` bytes)."""
    if value is None and none:
        return None
    if not isinstance(value, str):
        kind = "a str or None" if none else "a str"
        raise ArgumentTypeError(f"{name} must be {kind}, got {describe(value)}")
    if not value and not empty:
        raise ArgumentValueError(f"{name} must not be empty")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise ArgumentValueError(f"{name} is not valid Unicode (a lone surrogate?)") from None
    if size > max_len:
        raise ArgumentValueError(f"{name} must be at most {max_len} bytes in UTF-8, got {size}")
    return value


def check_callable(name: str, value: Any, *, none: bool = True) -> Any:
    if value is None and none:
        return None
    if not callable(value):
        raise ArgumentTypeError(f"{name} must be callable, got {describe(value)}")
    return value


def check_timeout(name: str, value: Any, *, none: bool = True) -> float | None:
    """A wait: a real number >= 0 (``None`` for no bound when ``none``).
    ``math.inf`` is allowed; NaN is not."""
    if value is None and none:
        return None
    cls = type(value)
    if (cls is float or cls is int) and value >= 0:  # the usual case, without the checks below
        plain: float = value  # (NaN fails the comparison)
        return plain
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        kind = "a number or None" if none else "a number"
        raise ArgumentTypeError(f"{name} must be {kind}, got {describe(value)}")
    if math.isnan(value):
        raise ArgumentValueError(f"{name} must be a number, not NaN")
    if value < 0:
        raise ArgumentValueError(f"{name} must be >= 0, got {value}")
    number = _as_int(value)
    return float(value) if number is None else number


def check_topic(name: str, value: Any) -> str:
    """A topic name Kafka can have (see the module's rules)."""
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{name} must be a str (a topic name), got {describe(value)}")
    if not value:
        raise ArgumentValueError(f"{name} must not be empty")
    if len(value) > _TOPIC_MAX:
        raise ArgumentValueError(
            f"{name} must be at most {_TOPIC_MAX} characters, got {len(value)}"
        )
    if value in (".", "..") or not _TOPIC_CHARS.fullmatch(value):
        raise ArgumentValueError(
            f"{name} {_short.repr(value)} is not a topic name: Kafka allows only ASCII "
            "letters, digits, '.', '_' and '-' (and neither '.' nor '..')"
        )
    return value


def _not_one_string(name: str, values: Any, what: str) -> None:
    if isinstance(values, str | bytes | bytearray):
        one = "string" if isinstance(values, str) else type(values).__name__
        raise ArgumentTypeError(f"{name} must be an iterable of {what}, not one {one}")
    if not isinstance(values, Iterable):
        raise ArgumentTypeError(f"{name} must be an iterable of {what}, got {describe(values)}")


def check_topics(name: str, values: Any) -> list[str]:
    """Topic names (an iterable, never one string)."""
    _not_one_string(name, values, "topic names")
    return [check_topic(f"{name}[{i}]", t) for i, t in enumerate(values)]


def check_names(
    name: str, values: Any, check: Callable[[str, Any], Any], what: str = "names"
) -> list[Any]:
    """An iterable (never one string) of items each passed through ``check``."""
    _not_one_string(name, values, what)
    return [check(f"{name}[{i}]", v) for i, v in enumerate(values)]


def check_group_id(name: str, value: Any) -> str:
    result: str = check_str(name, value)
    return result


def check_group_ids(name: str, values: Any) -> list[str]:
    return check_names(name, values, check_group_id, "group ids")


def check_partition(name: str, value: Any) -> int:
    """A partition number: 0 to 2**31 - 1."""
    return check_int(name, value, minimum=0, maximum=INT32_MAX)


def check_topic_partition(name: str, value: Any) -> TopicPartition:
    """A :class:`TopicPartition` or a ``(topic, partition)`` pair."""
    if isinstance(value, str | bytes) or not isinstance(value, tuple | list):
        raise ArgumentTypeError(
            f"{name} must be a TopicPartition or a (topic, partition) pair, got {describe(value)}"
        )
    if len(value) != 2:
        raise ArgumentValueError(
            f"{name} must be a (topic, partition) pair, got {len(value)} items"
        )
    topic, partition = value
    return TopicPartition(
        check_topic(f"{name}.topic", topic), check_partition(f"{name}.partition", partition)
    )


def check_topic_partitions(name: str, values: Any) -> list[TopicPartition]:
    """An iterable of :class:`TopicPartition` (or pairs), never one pair's parts."""
    _not_one_string(name, values, "TopicPartition")
    if isinstance(values, TopicPartition):
        raise ArgumentTypeError(
            f"{name} must be an iterable of TopicPartition, not one TopicPartition"
        )
    return [check_topic_partition(f"{name}[{i}]", tp) for i, tp in enumerate(values)]


def check_offset(name: str, value: Any, *, minimum: int = 0) -> int:
    """An offset: ``minimum`` (0 unless said) to 2**63 - 1."""
    return check_int(name, value, minimum=minimum, maximum=INT64_MAX)


def check_offsets(
    name: str, value: Any, *, minimum: int = 0, check_value: Callable[[str, Any], Any] | None = None
) -> dict[TopicPartition, Any]:
    """A mapping of :class:`TopicPartition` (or pairs) to offsets (each checked
    by ``check_value``, default :func:`check_offset` from ``minimum``)."""
    if not isinstance(value, Mapping):
        raise ArgumentTypeError(
            f"{name} must be a mapping of TopicPartition to offset, got {describe(value)}"
        )
    out: dict[TopicPartition, Any] = {}
    for key, offset in value.items():
        tp = check_topic_partition(f"{name} key {_short.repr(key)}", key)
        where = f"{name}[{tp!r}]"
        if check_value is not None:
            out[tp] = check_value(where, offset)
        else:
            check_offset(where, offset, minimum=minimum)
            out[tp] = offset
    return out


def check_timestamp_ms(name: str, value: Any, *, none: bool = True) -> int | None:
    """A record timestamp in milliseconds since the epoch: 0 to 2**63 - 1 (as
    Java's producer: "Timestamp should always be non-negative or null")."""
    if value is None and none:
        return None
    return check_int(name, value, minimum=0, maximum=INT64_MAX)


def check_headers(name: str, value: Any) -> Sequence[tuple[str, bytes | None]]:
    """Record headers, ``(str, bytes | str | None)`` pairs or a mapping, as
    ``(str, bytes | None)`` pairs (``str`` values UTF-8 encoded)."""
    if value is None:
        return ()
    if isinstance(value, Mapping):
        items: Iterable[Any] = value.items()
    elif isinstance(value, str | bytes | bytearray) or not isinstance(value, Iterable):
        raise ArgumentTypeError(
            f"{name} must be (key, value) pairs or a mapping, got {describe(value)}"
        )
    else:
        items = value
    out: list[tuple[str, bytes | None]] = []
    for i, item in enumerate(items):
        if not isinstance(item, tuple | list) or len(item) != 2:
            raise ArgumentTypeError(
                f"{name}[{i}] must be a (key, value) pair, got {describe(item)}"
            )
        key, v = item
        check_str(f"{name}[{i}] key", key, empty=True, max_len=INT32_MAX)
        if isinstance(v, str):
            try:
                v = v.encode("utf-8")
            except UnicodeEncodeError:
                raise ArgumentValueError(
                    f"{name}[{i}] ({key!r}) value is not valid Unicode"
                ) from None
        elif isinstance(v, bytearray | memoryview):
            v = bytes(v)
        elif v is not None and not isinstance(v, bytes):
            raise ArgumentTypeError(
                f"{name}[{i}] ({_short.repr(key)}) value must be bytes, str or None, "
                f"got {describe(v)}"
            )
        out.append((key, v))
    return out


def check_committed_offset(name: str, value: Any) -> int:
    """An offset to commit: an int >= 0, or an ``OffsetAndMetadata`` whose
    metadata is a str or None (kept as it is)."""
    check_offset(name, value)
    check_str(f"{name}.metadata", getattr(value, "metadata", None), empty=True, none=True)
    return value  # type: ignore[no-any-return]  # an OffsetAndMetadata keeps its metadata


def check_instance(
    name: str, value: Any, kind: type | tuple[type, ...], *, none: bool = False
) -> Any:
    """``value`` itself, when it is a ``kind`` (or None, with ``none``)."""
    if value is None and none:
        return None
    if not isinstance(value, kind):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise ArgumentTypeError(f"{name} must be a {names}, got {describe(value)}")
    return value


def check_instances(name: str, values: Any, kind: type | tuple[type, ...]) -> list[Any]:
    """An iterable (never one string, nor one ``kind``) of ``kind`` instances."""
    if isinstance(values, kind):
        raise ArgumentTypeError(
            f"{name} must be an iterable of them, not one {type(values).__name__}"
        )
    return check_names(name, values, lambda n, v: check_instance(n, v, kind), "items")
