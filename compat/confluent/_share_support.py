"""What the drop-in's share consumer (:mod:`._share`) needs around trafka's:
its two exceptions, the per-call ownership guard, librdkafka's error codes as
the Python exceptions confluent-kafka raises for them, the configuration's
``logger`` as librdkafka serves it to a share consumer.

Rules (confluent-kafka 2.16's, librdkafka's where they decide):

* :class:`IllegalStateException` and :class:`ConcurrentModificationException`
  are ``RuntimeError`` subclasses and not ``KafkaException``: a misuse, not a
  Kafka error. A share consumer raises librdkafka's ``_STATE`` as the first,
  ``_CONFLICT`` as the second, ``_INVALID_ARG`` as ``ValueError`` and any
  other code as ``KafkaException``; ``args[0]`` of the first three is text.
* A consumer is owned by the thread inside one of its calls for the whole
  call (a poll's wait and the callbacks it serves included): another thread's
  call meanwhile raises ConcurrentModificationException, a call from inside a
  callback (the same thread) IllegalStateException.
* ``logger`` gets the client's log lines only when a call serves the queue
  (poll, commit_sync, commit_async, close), as librdkafka's share consumer,
  which has no background log thread. Lines read ``FACILITY [name] [thrd:app]: text``.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Iterator
from typing import NoReturn

from ._errors import KafkaError, KafkaException, error_of, internal

__all__ = [
    "ConcurrentModificationException",
    "IllegalStateException",
    "Owner",
    "raise_code",
    "share_error_of",
]

log = logging.getLogger("trafka.compat.confluent")

_STATE = internal("_STATE")
_INVALID_ARG = internal("_INVALID_ARG")
_CONFLICT = internal("_CONFLICT")
_RESOLVE = internal("_RESOLVE")
#: librdkafka's words for the codes the share consumer raises as text.
TEXT = {
    _STATE: "Local: Erroneous state",
    _INVALID_ARG: "Local: Invalid argument or configuration",
}


class IllegalStateException(RuntimeError):
    """A share consumer call the consumer's state does not allow (librdkafka's
    ``_STATE``): closed, not subscribed, not in explicit acknowledgement mode..."""


class ConcurrentModificationException(RuntimeError):
    """A share consumer called from a second thread while a first is inside a
    call (librdkafka's ``_CONFLICT``)."""


def raise_code(code: int, text: str) -> NoReturn:
    """Raise librdkafka's ``code`` as a share consumer does (see the module's rules)."""
    if code == _STATE:
        raise IllegalStateException(text)
    if code == _INVALID_ARG:
        raise ValueError(text)
    if code == _CONFLICT:
        raise ConcurrentModificationException(text)
    raise KafkaException(KafkaError(code, text))


_RESOLVE_WORDS = (
    "Name or service not known",
    "nodename nor servname",
    "Temporary failure in name resolution",
    "No address associated with hostname",
)


def share_error_of(exc: BaseException) -> KafkaError:
    """:func:`~._errors.error_of`, with a host name that does not resolve as
    librdkafka's ``_RESOLVE`` rather than ``_TRANSPORT``."""
    error = error_of(exc)
    seen: BaseException | None = exc
    for _ in range(8):  # the causes, as far as they go
        if seen is None:
            break
        if isinstance(seen, socket.gaierror):
            return KafkaError(_RESOLVE, error.str())
        seen = seen.__cause__ or seen.__context__
    if any(words in str(exc) for words in _RESOLVE_WORDS):
        return KafkaError(_RESOLVE, error.str())
    return error


_REENTERED = (
    "Share consumer methods are not accessible from user-defined acknowledgement commit callback"
)


class Owner:
    """The thread inside a call of one share consumer (see the module's rules)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: int | None = None

    @contextlib.contextmanager
    def call(self, reentered: str = _REENTERED) -> Iterator[None]:
        """Own the consumer for a call; ``reentered``: what a call from inside a
        callback (the owner's thread) raises."""
        me = threading.get_ident()
        if not self._lock.acquire(blocking=False):
            other = self._thread
            if other == me:
                raise IllegalStateException(reentered)
            raise ConcurrentModificationException(
                "Share consumer is not safe for multi-threaded access. "
                f"currentThread(id: {me}) otherThread(id: {other})"
            )
        self._thread = me
        try:
            yield
        finally:
            self._thread = None
            self._lock.release()
