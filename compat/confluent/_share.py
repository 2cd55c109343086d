"""confluent-kafka's ``ShareConsumer`` (KIP-932 share groups, confluent-kafka
2.16's API) and ``DeserializingShareConsumer`` over trafka's blocking share
consumer (:class:`trafka.sdk.blocking.ShareConsumer`).

Rules (confluent-kafka's; see also :mod:`._share_support`):

* ``poll(timeout)`` returns :class:`Messages` (empty when the time ran out);
  with implicit acknowledgement (the default) starting a poll or a commit
  accepts the records of the previous poll, with explicit acknowledgement
  every record is acknowledged (``acknowledge``) before the next poll.
* The configuration's callbacks (``error_cb``, ``stats_cb``, ``throttle_cb``,
  ``logger``'s lines, the acknowledgement commit callback) are queued and
  called in the application's thread by ``poll``, ``commit_sync``,
  ``commit_async`` and ``close``; what one raises comes out of that call (of
  ``close``: logged, as the other clients' closes do).
* Every call of a closed consumer raises IllegalStateException("Share consumer
  closed") (checked before its arguments); ``close()`` again does nothing.
* ``subscribe`` takes a list; its names are kept as given (a ``^`` is part of
  the name, not a pattern) and ``subscription()`` answers them sorted. A name
  Kafka cannot have is kept too, but can match no topic.
* Configuration errors: no ``group.id`` or ``on_commit``, or a consumer setting
  share groups do not take, raise ValueError; a setting trafka does not know or
  a bad value KafkaException (``_INVALID_ARG``), as librdkafka.
"""

from __future__ import annotations

import re
import time
from typing import Any

from trafka.sdk import ConfigError, UsageError
from trafka.sdk.blocking import ShareConsumer as _BlockingShareConsumer

from ._callbacks import Served, check_sasl_credentials, config_of, translate_config
from ._errors import KafkaError, KafkaException, error_of, internal
from ._logs import queue_logs
from ._model import AcknowledgeType, Messages
from ._share_support import (
    TEXT,
    ConcurrentModificationException,
    IllegalStateException,
    Owner,
    raise_code,
    share_error_of,
)
from ._types import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
    Message,
    TopicPartition,
)
from .serialization import MessageField, SerializationContext

__all__ = [
    "ConcurrentModificationException",
    "DeserializingShareConsumer",
    "IllegalStateException",
    "ShareConsumer",
]

_CLOSED = "Share consumer closed"
_STATE = internal("_STATE")
_INVALID_ARG = internal("_INVALID_ARG")
#: How long one wait of a poll lasts: the queued callbacks are served between waits.
_STEP_S = 0.1
_FOREVER_MS = 2**31 - 1
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
_TIMESTAMP_TYPES = {0: TIMESTAMP_CREATE_TIME, 1: TIMESTAMP_LOG_APPEND_TIME}


def _seconds(name: str, value: Any) -> float:
    """A timeout (seconds) as confluent-kafka parses it: any real number."""
    if not isinstance(value, int | float):
        shown = "NoneType" if value is None else type(value).__name__
        raise TypeError(f"must be real number, not {shown}")
    return float(value)


def _integer(value: Any) -> int:
    if not isinstance(value, int):
        raise TypeError(f"'{type(value).__name__}' object cannot be interpreted as an integer")
    return value


def _message(record: Any) -> Message:
    """trafka's ShareRecord as confluent-kafka's Message."""
    kind = _TIMESTAMP_TYPES.get(record.timestamp_type, TIMESTAMP_NOT_AVAILABLE)
    return Message(
        record.topic,
        record.partition,
        record.offset,
        record.key,
        record.value,
        list(record.headers) or None,
        None,
        (kind, record.timestamp if kind != TIMESTAMP_NOT_AVAILABLE else -1),
        None,
        record.leader_epoch if record.leader_epoch >= 0 else None,
        record.delivery_count,
    )


class _AckCallback:
    """The acknowledgement commit callback: trafka's client hands it each
    partition's outcome on its thread, it queues the application's callback."""

    def __init__(self, served: Served) -> None:
        self._served = served
        self.fn: Any = None

    def on_result(self, offsets: Any, error: BaseException | None) -> None:
        converted = {
            TopicPartition(tp.topic, tp.partition, 0): set(found) for tp, found in offsets.items()
        }
        exc = None if error is None else KafkaException(share_error_of(error))
        self._served.put(self._call, converted, exc)

    def _call(self, offsets: dict[TopicPartition, set[int]], exc: KafkaException | None) -> None:
        if self.fn is not None:
            self.fn(offsets, exc)


def _create_error(exc: ConfigError) -> BaseException:
    text = str(exc)
    if "not a share consumer setting" in text or "cannot be used" in text:
        return ValueError(f"Failed to create share consumer: {text}")
    return KafkaException(KafkaError(_INVALID_ARG, text))


class ShareConsumer:
    """confluent-kafka's ``ShareConsumer(config)`` (a dict, keyword arguments or both)."""

    _sdk: Any = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if self._sdk is not None:
            raise RuntimeError("ShareConsumer already initialized")
        conf = config_of(args, kwargs, "ShareConsumer")
        if "on_commit" in conf:
            raise ValueError("on_commit is not supported on ShareConsumer")
        if not conf.get("group.id"):
            raise ValueError("Failed to create consumer: group.id must be set")
        self._closed = False
        self._owner = Owner()
        self._served = Served()
        self._subscription: list[str] = []
        self._any_legal = False  # a subscribed name that can be a topic's
        # Acknowledgements a commit would send (records of the last poll in implicit
        # mode, acknowledge() calls in explicit mode): without, a commit has nothing to do.
        self._unsent = False
        # Explicit mode: the records of the last poll not acknowledged yet.
        self._awaiting: set[tuple[str, int, int]] = set()
        self._ack_callback = _AckCallback(self._served)
        sdk_conf = self._translate(conf)
        try:
            sdk = _BlockingShareConsumer(config=sdk_conf)
        except ConfigError as exc:
            self._served.stop_background()
            raise _create_error(exc) from None
        except Exception as exc:
            self._served.stop_background()
            raise KafkaException(error_of(exc)) from None
        sdk.set_acknowledgement_commit_callback(self._ack_callback.on_result)
        self._explicit: bool = sdk.config.explicit_acknowledgement
        self._sdk = sdk

    def _translate(self, conf: dict[str, Any]) -> dict[str, Any]:
        """confluent-kafka's configuration as trafka's: the callbacks queued."""
        conf = dict(conf)
        served = self._served
        error_cb = conf.pop("error_cb", None)
        queue_logs(conf, served, "share_consumer")
        out = translate_config(conf, served)
        if error_cb is not None:
            out["error_cb"] = served.wrap(error_cb, lambda exc: (share_error_of(exc),))
        return out

    # -- helpers --------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed or self._sdk is None:
            raise IllegalStateException(_CLOSED)

    def _serve(self) -> None:
        if self._served.pending():
            self._served.serve(0)

    def _sdk_call(self, fn: Any, *args: Any, what: str = "") -> Any:
        """``fn(*args)`` of trafka's consumer, its errors as confluent-kafka's."""
        try:
            return fn(*args)
        except UsageError as exc:
            raise IllegalStateException(f"{what}{exc}") from None
        except ConfigError as exc:
            raise ValueError(f"{what}{exc}") from None
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{what}{exc}") from None
        except Exception as exc:
            error = share_error_of(exc)
            if error.code() in (_STATE, _INVALID_ARG):
                raise_code(error.code(), f"{what}{error.str()}")
            raise KafkaException(error) from None

    # -- subscription ---------------------------------------------------------------------

    def subscribe(self, topics: list[str]) -> None:
        """Subscribe to ``topics`` (replacing the subscription; ``[]`` unsubscribes)."""
        self._check_open()
        if not isinstance(topics, list):
            raise TypeError("expected list of topic unicode strings")
        names = [t if isinstance(t, str) else str(t) for t in topics]
        with self._owner.call():
            if not all(names) or len(set(names)) != len(names):
                raise ValueError(f"Failed to subscribe: {TEXT[_INVALID_ARG]}")
            legal = [n for n in names if _TOPIC_NAME.fullmatch(n) and n not in (".", "..")]
            self._sdk_call(self._sdk.subscribe, legal, what="Failed to subscribe: ")
            self._subscription = sorted(names)
            self._any_legal = bool(legal)

    def unsubscribe(self) -> None:
        """Leave the subscription (acknowledgements still pending are still sent)."""
        self.subscribe([])

    def subscription(self) -> list[str]:
        """The topics subscribed to, sorted."""
        self._check_open()
        with self._owner.call(f"Failed to get subscription: {TEXT[_STATE]}"):
            return list(self._subscription)

    # -- records --------------------------------------------------------------------------

    def poll(self, timeout: float = -1) -> Messages:
        """The next records delivered to this member, waiting up to ``timeout``
        seconds (negative: until some come); empty when none came in time."""
        self._check_open()
        seconds = _seconds("timeout", timeout)
        with self._owner.call():
            self._serve()
            if not self._subscription:
                raise IllegalStateException("Consumer is not subscribed to any topics")
            if self._awaiting:  # (explicit mode; what was acknowledged stays unsent)
                raise IllegalStateException(
                    f"{len(self._awaiting)} records from previous poll have not been acknowledged"
                )
            deadline = None if seconds < 0 else time.monotonic() + seconds
            while True:
                left = _STEP_S if deadline is None else deadline - time.monotonic()
                step = max(0.0, min(_STEP_S, left))
                records = self._wait(step)
                # (trafka's poll sent what was pending: the acknowledgements ride on it)
                self._unsent = bool(records) and not self._explicit
                if records:
                    if self._explicit:
                        self._awaiting = {(r.topic, r.partition, r.offset) for r in records}
                    return Messages([_message(r) for r in records])
                self._serve()
                if deadline is not None and time.monotonic() >= deadline:
                    return Messages()

    def _wait(self, seconds: float) -> list[Any]:
        """One wait of a poll: trafka's poll, or (none of the subscribed names
        can be a topic) a wait for a queued callback."""
        if self._any_legal:
            records: list[Any] = self._sdk_call(self._sdk.poll, seconds * 1000)
            return records
        self._served.serve(seconds)
        return []

    # -- acknowledgements -----------------------------------------------------------------

    def acknowledge(self, message: Message, ack_type: int = AcknowledgeType.ACCEPT) -> None:
        """Acknowledge a message of the last poll (explicit acknowledgement mode):
        ACCEPT (the default), RELEASE (deliver again) or REJECT."""
        self._check_open()
        if not isinstance(message, Message):
            shown = "None" if message is None else type(message).__name__
            raise TypeError(f"argument 1 must be confluent_kafka.cimpl.Message, not {shown}")
        kind = _integer(ack_type)
        with self._owner.call():
            self._acknowledge(
                message.topic(), message.partition(), message.offset(), kind, "message"
            )

    def acknowledge_offset(
        self, topic: str, partition: int, offset: int, ack_type: int = AcknowledgeType.ACCEPT
    ) -> None:
        """:meth:`acknowledge` a message of the last poll by its coordinates."""
        self._check_open()
        if not isinstance(topic, str):
            raise TypeError(f"argument 1 must be str, not {type(topic).__name__}")
        partition, offset, kind = _integer(partition), _integer(offset), _integer(ack_type)
        with self._owner.call():
            self._acknowledge(topic, partition, offset, kind, "offset")

    def _acknowledge(
        self, topic: str | None, partition: int | None, offset: int | None, kind: int, what: str
    ) -> None:
        failed = f"Failed to acknowledge {what}: "
        if topic is None or partition is None or offset is None or partition < 0 or offset < 0:
            raise ValueError(failed + TEXT[_INVALID_ARG])
        if not self._explicit:
            raise IllegalStateException(failed + TEXT[_STATE])
        if kind not in (1, 2, 3):
            raise ValueError(failed + TEXT[_INVALID_ARG])
        try:
            self._sdk.acknowledge_offset(topic, partition, offset, AcknowledgeType(kind))
            self._unsent = True
            self._awaiting.discard((topic, partition, offset))
        except (UsageError, TypeError, ValueError):
            # Not delivered by the last poll, or already sent (a name Kafka cannot have included).
            raise IllegalStateException(failed + TEXT[_STATE]) from None
        except Exception as exc:
            raise KafkaException(share_error_of(exc)) from None

    def set_acknowledgement_commit_callback(self, callback: Any) -> None:
        """Call ``callback({TopicPartition: offsets}, KafkaException or None)`` as
        the broker answers acknowledgements (served by poll, the commits and close);
        None removes it."""
        self._check_open()
        if callback is not None and not callable(callback):
            raise TypeError("callback must be callable or None")
        with self._owner.call():
            self._ack_callback.fn = callback

    def commit_sync(self, timeout: float = 60) -> dict[TopicPartition, KafkaException | None]:
        """Send the acknowledgements made so far (implicit mode: the last poll's
        records, accepted) and wait up to ``timeout`` seconds (-1: no end) for the
        answers: per partition None, or the error as KafkaException."""
        self._check_open()
        seconds = _seconds("timeout", timeout)
        with self._owner.call():
            self._serve()
            results: dict[Any, BaseException | None] = {}
            if self._unsent:
                ms = _FOREVER_MS if seconds < 0 else int(seconds * 1000)
                results = self._sdk_call(self._sdk.commit, ms)
                self._unsent = False
            self._serve()
        return {
            TopicPartition(tp.topic, tp.partition, 0): (
                None if error is None else KafkaException(share_error_of(error))
            )
            for tp, error in sorted(results.items())
        }

    def commit_async(self) -> None:
        """Send the acknowledgements made so far; the callback hears the answers."""
        self._check_open()
        with self._owner.call():
            self._serve()
            if self._unsent:
                self._sdk_call(self._sdk.commit_async)
                self._unsent = False
            self._serve()

    def set_sasl_credentials(self, username: str, password: str) -> None:
        """Take new SASL credentials (PLAIN, SCRAM) for the next authentication."""
        self._check_open()
        check_sasl_credentials(username, password)
        with self._owner.call():
            self._credentials = (username, password)

    # -- closing --------------------------------------------------------------------------

    def close(self) -> None:
        """Send the acknowledgements still pending (implicit mode: the last poll's
        records, accepted), leave the share group and close; again: nothing."""
        if self._closed or self._sdk is None:
            return
        with self._owner.call():
            self._closed = True
            try:
                self._sdk.close()
            except Exception as exc:
                raise KafkaException(share_error_of(exc)) from None
            finally:
                self._served.serve_at_close()

    def __enter__(self) -> ShareConsumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class DeserializingShareConsumer(ShareConsumer):
    """:class:`ShareConsumer` with ``key.deserializer`` / ``value.deserializer``
    in its configuration: ``poll`` deserializes each message's key and value in
    place. A message whose key or value fails keeps its bytes and gets the
    error ``_KEY_DESERIALIZATION`` / ``_VALUE_DESERIALIZATION`` (the rest of the
    batch is kept); it can be acknowledged (REJECT) as any other."""

    def __init__(self, conf: dict[str, Any]) -> None:
        conf = dict(conf)
        self._key_deserializer = conf.pop("key.deserializer", None)
        self._value_deserializer = conf.pop("value.deserializer", None)
        super().__init__(conf)

    def poll(self, timeout: float = -1) -> Messages:
        messages = super().poll(timeout)
        for message in messages:
            if message.error() is None:
                self._deserialize_in_place(message)
        return messages

    def _deserialize_in_place(self, message: Message) -> None:
        topic = message.topic()
        if topic is None:
            raise TypeError("a message without a topic cannot be deserialized")
        # The key first (its deserializer may leave state for the value's); both
        # set only once both are made.
        ctx = SerializationContext(topic, MessageField.KEY, message.headers())
        key = message.key()
        if self._key_deserializer is not None:
            try:
                key = self._key_deserializer(key, ctx)
            except Exception as exc:
                message.set_error(KafkaError(internal("_KEY_DESERIALIZATION"), str(exc)))
                return
        value = message.value()
        if self._value_deserializer is not None:
            ctx.field = MessageField.VALUE
            try:
                value = self._value_deserializer(value, ctx)
            except Exception as exc:
                message.set_error(KafkaError(internal("_VALUE_DESERIALIZATION"), str(exc)))
                return
        message.set_key(key)
        message.set_value(value)
