"""Producer and consumer interceptors: code that sees every record a client
sends or hands out (Java's ``ProducerInterceptor`` and ``ConsumerInterceptor``,
KIP-42), configured with ``interceptor.classes``.

Rules, as Java's clients define them:

* Several interceptors run in the order configured. ``on_send`` and
  ``on_consume`` get what the previous interceptor returned.
* What an interceptor raises (or a hook's result of the wrong type) is logged
  (WARNING, logger ``trafka.sdk.interceptors``) and never fails the send, the
  poll or the commit; the next interceptor gets the record(s) of the last one
  that succeeded.
* ``on_send(record)`` runs in ``send()``, before the key and value are
  serialized and the partition is chosen (the blocking producer: in the
  caller's thread); it returns the :class:`ProducerRecord` to send, maybe a
  modified one (``dataclasses.replace(record, value=...)``).
* ``on_acknowledgement(metadata, error)`` once per record that went through
  ``on_send``: acknowledged (``error`` None) or failed, whether ``send()``
  itself raised (after ``on_send``) or the delivery failed later. On failure
  ``metadata`` carries the topic and the partition (-1 when none was chosen),
  offset and timestamp -1. It runs on the client's event loop (for a failure
  in ``send()``, in the sending task or thread), before the callbacks of the
  record's future: keep it short.
* ``on_consume(records)`` before a poll hands records to the application
  (``getmany``, and ``getone``/iteration for each batch they hand out one by
  one); it returns the records to hand out (a dict of TopicPartition to lists
  of ConsumerRecord), maybe others. What it drops still counts as consumed
  for ``getmany``'s commits.
* ``on_commit(offsets)`` after each successful commit of offsets, whoever
  asked for it (auto-commit, ``commit()``, before a revocation, at close), as
  a dict of TopicPartition to the offset committed.
* ``close()`` once, when the client closes (a producer's after its last
  acknowledgement).
* An entry of ``interceptor.classes`` is an import path (``"pkg.module:Class"``
  or ``"pkg.module.Class"``), a class, or an object. A class is instantiated
  for each client with no arguments, then ``configure(config)`` is called with
  the client's config object if the class has that method (Java's
  ``Configurable``). An object is used as it is, by every client given it,
  and closed with each.
* Hooks an interceptor lacks are skipped; :class:`ProducerInterceptor` and
  :class:`ConsumerInterceptor` define each as doing nothing, to subclass. An
  entry with none of its client's hooks is refused (a consumer interceptor
  given to a producer).
* With no interceptor, a client carries none of this: the producer's hot path
  (:attr:`~trafka.sdk.producer_core.ProducerCore.append_hot`) is only taken
  without interceptors.
* OpenTelemetry's spans (:mod:`.tracing`, with ``otel.enabled``) ride on the
  same hooks: the ``send`` span starts after the interceptors' ``on_send``
  (the headers it adds are the last change to the record) and ends after
  their ``on_acknowledgement``; the ``poll`` span is made before their
  ``on_consume``, of the records as fetched.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING, Any

from .config.values import ValueSpec
from .errors import ConfigError
from .producer_types import ProducerRecord
from .tracing import ConsumerTracing, ProducerTracing, consumer_tracing, producer_tracing

# The consumer's settings import this module (``interceptor.classes``): the
# producer's batches, and the Produce messages behind them, load only with a
# producer (a Spark worker that reads, a consumer, never loads them).
if TYPE_CHECKING:
    from .producer_batches import RecordMetadata

__all__ = [
    "ConsumerInterceptor",
    "ConsumerInterceptors",
    "ProducerInterceptor",
    "ProducerInterceptors",
    "ProducerRecord",
]

log = logging.getLogger("trafka.sdk.interceptors")

_PRODUCER_HOOKS = ("on_send", "on_acknowledgement")
_CONSUMER_HOOKS = ("on_consume", "on_commit")


class ProducerInterceptor:
    """A producer interceptor doing nothing: subclass it and override hooks."""

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        """In ``send()``, before serialization and partitioning: the record to send."""
        return record

    def on_acknowledgement(self, metadata: RecordMetadata, error: BaseException | None) -> None:
        """Once per record: delivered (``error`` None) or failed (offset -1)."""

    def close(self) -> None:
        """The producer is closing (after its last acknowledgement)."""


class ConsumerInterceptor:
    """A consumer interceptor doing nothing: subclass it and override hooks."""

    def on_consume(self, records: dict[Any, list[Any]]) -> dict[Any, list[Any]]:
        """Before a poll hands ``records`` out: the records to hand out."""
        return records

    def on_commit(self, offsets: dict[Any, int]) -> None:
        """After a successful commit of ``offsets`` (TopicPartition to offset)."""

    def close(self) -> None:
        """The consumer is closing."""


# -- the setting -----------------------------------------------------------------------------


def _resolve(name: str, path: str) -> Any:
    """The object an import path names: ``pkg.module:Attr`` or ``pkg.module.Attr``."""
    path = path.strip()
    if ":" in path:
        module_name, _, attr = path.partition(":")
    else:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise ConfigError(
            f"{name}: {path!r} is not an import path ('pkg.module:Class' or 'pkg.module.Class')"
        )
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{name}: cannot import {module_name!r} for {path!r}: {exc}") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(f"{name}: {module_name!r} has no {attr!r} (from {path!r})") from None
    return obj


def interceptor_classes(hooks: tuple[str, ...]) -> Callable[[str, Any], tuple[Any, ...]]:
    """The coercion of ``interceptor.classes`` for a client whose hooks are
    ``hooks``: a comma-separated string or a sequence of import paths, classes
    and objects, to a tuple of classes and objects."""

    def coerce(name: str, value: Any) -> tuple[Any, ...]:
        if value is None:
            return ()
        if isinstance(value, str):
            items: list[Any] = [v for v in (p.strip() for p in value.split(",")) if v]
        elif isinstance(value, list | tuple):
            items = list(value)
        else:
            items = [value]  # one class or object
        out = []
        for item in items:
            if isinstance(item, str):
                item = _resolve(name, item)
            if not any(callable(getattr(item, h, None)) for h in hooks):
                raise ConfigError(
                    f"{name}: {item!r} has none of {', '.join(hooks)}: not an interceptor "
                    "of this client"
                )
            out.append(item)
        return tuple(out)

    coerce.value_spec = ValueSpec(  # type: ignore[attr-defined]
        "list of interceptors",
        note="import paths (pkg.module:Class or pkg.module.Class), classes or objects; "
        "a comma-separated string is taken",
    )
    return coerce


producer_interceptor_classes = interceptor_classes(_PRODUCER_HOOKS)
consumer_interceptor_classes = interceptor_classes(_CONSUMER_HOOKS)


def _instances(entries: Iterable[Any], config: Any) -> list[Any]:
    """One client's interceptors: classes instantiated (and configured), objects as given.

    Raises:
        ConfigError: a class could not be instantiated or configured.
    """
    out = []
    for entry in entries:
        if isinstance(entry, type):
            try:
                obj = entry()
                configure = getattr(obj, "configure", None)
                if callable(configure):
                    configure(config)
            except Exception as exc:
                raise ConfigError(f"interceptor.classes: {entry.__qualname__}: {exc!r}") from exc
            out.append(obj)
        else:
            out.append(entry)
    return out


def _hooks(objs: Iterable[Any], hook: str) -> list[tuple[Any, Callable[..., Any]]]:
    return [(obj, fn) for obj in objs if callable(fn := getattr(obj, hook, None))]


class _Chain:
    """Interceptors of one client, and the calls of their hooks that never raise."""

    __slots__ = ("_closers", "_objs")

    def __init__(self, objs: list[Any]) -> None:
        self._objs = objs
        self._closers = _hooks(objs, "close")

    def close(self) -> None:
        """Each interceptor's ``close()``, once (later calls do nothing)."""
        closers, self._closers = self._closers, []
        for obj, fn in closers:
            try:
                fn()
            except Exception:
                log.warning("interceptor %r: close() raised", obj, exc_info=True)


class ProducerInterceptors(_Chain):
    """A producer's interceptors (see the module doc), and its spans."""

    __slots__ = ("_acks", "_sends", "tracing")

    def __init__(self, objs: list[Any], tracing: ProducerTracing | None = None) -> None:
        super().__init__(objs)
        self._sends = _hooks(objs, "on_send")
        self._acks = _hooks(objs, "on_acknowledgement")
        self.tracing = tracing

    @classmethod
    def of(cls, config: Any) -> ProducerInterceptors | None:
        """The interceptors of a new producer with ``config``; None without any
        (and without tracing)."""
        entries = config.interceptor_classes
        tracing = producer_tracing(config)
        if not entries and tracing is None:
            return None
        return cls(_instances(entries, config), tracing)

    def begin(self, record: ProducerRecord) -> tuple[ProducerRecord, Any]:
        """``on_send``, then the record's span started: the record to send and
        its span (None without tracing), for :meth:`end`."""
        record = self.on_send(record)
        if self.tracing is None:
            return record, None
        return self.tracing.start(record)

    def end(
        self,
        span: Any,
        record: ProducerRecord,
        metadata: RecordMetadata | None,
        error: BaseException | None,
        partition: int | None = None,
    ) -> None:
        """The outcome of a record :meth:`begin` took: acknowledged at
        ``metadata``, or failed with ``error`` (in ``partition`` when chosen)."""
        if error is None:
            assert metadata is not None
            self.on_acknowledgement(metadata, None)
        else:
            from .producer_batches import RecordMetadata

            part = record.partition if partition is None else partition
            metadata = RecordMetadata(record.topic, -1 if part is None else part, -1, -1)
            self.on_acknowledgement(metadata, error)
        if span is not None and self.tracing is not None:
            self.tracing.end(span, metadata, error)

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        for obj, fn in self._sends:
            try:
                out = fn(record)
            except Exception:
                log.warning(
                    "interceptor %r: on_send raised (record sent as it was)", obj, exc_info=True
                )
                continue
            if isinstance(out, ProducerRecord):
                record = out
            else:
                log.warning(
                    "interceptor %r: on_send returned %r, not a ProducerRecord (ignored)", obj, out
                )
        return record

    def on_acknowledgement(self, metadata: RecordMetadata, error: BaseException | None) -> None:
        for obj, fn in self._acks:
            try:
                fn(metadata, error)
            except Exception:
                log.warning("interceptor %r: on_acknowledgement raised", obj, exc_info=True)

    async def send(self, send: Callable[..., Awaitable[Any]], record: ProducerRecord) -> Any:
        """The async producer's :meth:`~trafka.sdk.producer.Producer.send` with
        these interceptors: ``on_send`` first, then ``await send(*args)`` (its
        general path, given the record's :meth:`ProducerRecord.send_args`), then
        ``on_acknowledgement`` for the record whatever becomes of it (raised
        here, or answered later)."""
        record, span = self.begin(record)
        try:
            future = await send(*record.send_args())
        except BaseException as exc:
            self.end(span, record, None, exc)
            raise
        future.add_done_callback(partial(self.acknowledge, span, record))
        return future

    def acknowledge(self, span: Any, record: ProducerRecord, future: Any) -> None:
        """A done callback of a record's future (either producer's: ``exception()``,
        ``result()`` and ``batch``, None while the record has none): its :meth:`end`."""
        error = future.exception()
        if error is None:
            self.end(span, record, future.result(), None)
        else:
            batch = future.batch
            self.end(span, record, None, error, None if batch is None else batch.partition)


class ConsumerInterceptors(_Chain):
    """A consumer's interceptors (see the module doc), and its spans."""

    __slots__ = ("_commits", "_consumes", "_tracing")

    def __init__(self, objs: list[Any], tracing: ConsumerTracing | None = None) -> None:
        super().__init__(objs)
        self._consumes = _hooks(objs, "on_consume")
        self._commits = _hooks(objs, "on_commit")
        self._tracing = tracing

    @classmethod
    def of(cls, config: Any) -> ConsumerInterceptors | None:
        """The interceptors of a new consumer with ``config``; None without any
        (and without tracing)."""
        entries = config.interceptor_classes
        tracing = consumer_tracing(config)
        if not entries and tracing is None:
            return None
        return cls(_instances(entries, config), tracing)

    def on_consume(self, records: dict[Any, list[Any]]) -> dict[Any, list[Any]]:
        if self._tracing is not None:
            self._tracing.polled([r for recs in records.values() for r in recs])
        for obj, fn in self._consumes:
            try:
                out = fn(records)
            except Exception:
                log.warning(
                    "interceptor %r: on_consume raised (records handed out as they were)",
                    obj,
                    exc_info=True,
                )
                continue
            if isinstance(out, dict):
                records = out
            else:
                log.warning(
                    "interceptor %r: on_consume returned %r, not a dict (ignored)", obj, out
                )
        return records

    def on_commit(self, offsets: dict[Any, int]) -> None:
        for obj, fn in self._commits:
            try:
                fn(dict(offsets))
            except Exception:
                log.warning("interceptor %r: on_commit raised", obj, exc_info=True)
