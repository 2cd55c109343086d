"""What confluent-kafka's clients serve from ``poll()``: the callbacks of the
configuration (``error_cb``, ``stats_cb``, ``throttle_cb``, ``on_commit``,
delivery reports), queued on the client's thread and called in the
application's, as librdkafka does.

Rules:

* A trafka client calls these on its own thread; here they are queued, and
  ``poll()`` (``flush()``, ``consume()``) calls them in the caller's thread.
* A queue of pending calls is a deque plus a condition that wakes a ``poll``
  waiting for one.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from trafka.sdk.errors import ConfigError

from ._errors import KafkaError, KafkaException, error_of, internal

__all__ = ["Served", "translate_config"]

_CALLBACKS = ("error_cb", "stats_cb", "throttle_cb")
log = logging.getLogger("trafka.compat.confluent")


class Served:
    """Calls queued by the client's thread, made by :meth:`serve` in the
    application's."""

    def __init__(self) -> None:
        self._calls: collections.deque[tuple[Callable[..., Any], tuple[Any, ...]]] = (
            collections.deque()
        )
        self._ready = threading.Condition()
        #: What stops with the client (the oauth_cb refresh thread).
        self.closers: list[Callable[[], None]] = []

    def put(self, fn: Callable[..., Any], *args: Any) -> None:
        with self._ready:
            self._calls.append((fn, args))
            self._ready.notify_all()

    def wrap(self, fn: Callable[..., Any], convert: Callable[..., tuple[Any, ...]]) -> Any:
        """A callback for trafka's client that queues ``fn(*convert(args))``."""
        return lambda *args: self.put(fn, *convert(*args))

    def serve(self, timeout: float | None) -> int:
        """Make the queued calls, waiting up to ``timeout`` s (None: forever)
        for a first one; the number made."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._ready:
            while not self._calls:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return 0
                self._ready.wait(left)
        served = 0
        while True:
            try:
                fn, args = self._calls.popleft()
            except IndexError:
                return served
            fn(*args)
            served += 1

    def pending(self) -> int:
        return len(self._calls)

    def stop_background(self) -> None:
        """Stop what runs beside the client (:attr:`closers`): it is closing."""
        for stop in self.closers:
            stop()

    def serve_at_close(self) -> None:
        """Make the calls left as the client closes; one that raises is logged
        and the rest are still made (librdkafka drops the events left at close:
        a closing client raises no callback's exception)."""
        self.stop_background()
        while True:
            try:
                self.serve(0)
                return
            except Exception:
                log.warning("a callback raised as the client closed", exc_info=True)


def _error_args(exc: BaseException) -> tuple[Any, ...]:
    return (error_of(exc),)


#: librdkafka settings that shape only librdkafka's own log lines: taken, and
#: nothing to do (trafka's log records carry the thread in ``threadName``).
_LOG_FORMAT_ONLY = ("log.thread.name",)


def config_of(args: tuple[Any, ...], kwargs: dict[str, Any], kind: str) -> dict[str, Any]:
    """The configuration a client was given as confluent-kafka takes it: a dict,
    keyword arguments, or both; nothing at all, or not a dict, is a TypeError."""
    if len(args) > 1:
        raise TypeError(f"{kind}() takes at most 1 positional argument ({len(args)} given)")
    if (not args and not kwargs) or (args and not isinstance(args[0], dict)):
        raise TypeError("expected configuration dict")
    # None is librdkafka's NULL: the setting's default
    conf = {k: v for k, v in {**(args[0] if args else {}), **kwargs}.items() if v is not None}
    # librdkafka's deprecated default.topic.config: topic settings, which win
    # over the same names at the top level, as there
    topic_conf = conf.pop("default.topic.config", None)
    if topic_conf is not None:
        if not isinstance(topic_conf, dict):
            raise TypeError("expected default.topic.config to be a dict")
        conf = {**conf, **topic_conf}
    for name in _LOG_FORMAT_ONLY:
        conf.pop(name, None)
    return conf


class OAuthTokens:
    """confluent-kafka's ``oauth_cb`` as librdkafka calls it: once as the client
    is made (a failure there fails the client), then again from a thread of
    its own once 80% of the token's lifetime has passed, and 10 s after a
    failed refresh; trafka's client takes the token it holds
    (``sasl_oauth_token_provider``)."""

    RETRY_S = 10.0

    def __init__(self, callback: Callable[..., Any], config: str | None) -> None:
        self._callback = callback
        self._config = config or ""
        self._stopped = threading.Event()
        self._token, self._extensions, expiry = self._ask()
        threading.Thread(
            target=self._refresh, args=(expiry,), name="trafka-oauth-cb", daemon=True
        ).start()

    def _ask(self) -> tuple[str, dict[str, str], float]:
        answer = self._callback(self._config)
        token, expiry = answer[0], float(answer[1])
        extensions = dict(answer[3]) if len(answer) > 3 and answer[3] else {}
        return token, extensions, expiry

    def _refresh(self, expiry: float) -> None:
        while True:
            now = time.time()
            if self._stopped.wait(max(expiry - now, 0.0) * 0.8):
                return
            try:
                self._token, self._extensions, expiry = self._ask()
            except Exception:
                log.warning("oauth_cb failed; asking again in %g s", self.RETRY_S, exc_info=True)
                expiry = time.time() + self.RETRY_S / 0.8

    def token(self) -> tuple[str, dict[str, str]]:
        return self._token, self._extensions

    def stop(self) -> None:
        self._stopped.set()


_AWS_IAM_KEY = "sasl.oauthbearer.metadata.authentication.type"


def _aws_iam_oauth_cb(conf: dict[str, Any]) -> Callable[[str], Any]:
    """confluent-kafka 2.16's AWS IAM tokens (``aws_iam``): its checks, a plain
    ValueError or ImportError as it raises them (chained to nothing); then
    STS's answers serve as an ``oauth_cb``'s."""
    from trafka.sdk.oauth_aws import aws_iam_token_provider  # (only when asked for)

    try:
        return aws_iam_token_provider(
            conf.get("sasl.oauthbearer.method"),
            conf.get("sasl.oauthbearer.config"),
            conf.get("sasl.oauthbearer.extensions"),
        )
    except ConfigError as exc:
        problem = str(exc)
    raise ValueError(problem)


def translate_config(conf: dict[str, Any], served: Served) -> dict[str, Any]:
    """confluent-kafka's configuration as trafka's: its callbacks queued for
    ``poll()``; what trafka takes as it is stays."""
    out = dict(conf)
    oauth_cb = out.pop("oauth_cb", None)
    if oauth_cb is None and out.get(_AWS_IAM_KEY) == "aws_iam":
        oauth_cb = _aws_iam_oauth_cb(out)
    if oauth_cb is not None:
        try:
            tokens = OAuthTokens(oauth_cb, out.get("sasl.oauthbearer.config"))
        except Exception as exc:
            raise KafkaException(
                KafkaError(internal("_AUTHENTICATION"), f"oauth_cb failed: {exc!r}")
            ) from None
        served.closers.append(tokens.stop)
        # (and once the client is gone, closed or not: its Served goes with it)
        weakref.finalize(served, tokens.stop)
        out["sasl_oauth_token_provider"] = tokens
    for name in _CALLBACKS:
        fn = out.pop(name, None)
        if fn is None:
            continue
        convert: Callable[..., tuple[Any, ...]] = (
            _error_args if name == "error_cb" else (lambda *args: args)
        )
        out[name] = served.wrap(fn, convert)
    return out


def seconds_to_ms(timeout: float | None) -> float | None:
    """confluent-kafka's timeout (seconds; None or negative: forever) in ms."""
    if timeout is None or timeout < 0:
        return None
    return timeout * 1000


__all__ += ["KafkaError", "config_of", "seconds_to_ms"]


class ClosedClient:
    """What a drop-in client's trafka client is before ``__init__`` made it (a
    subclass that never calls it) and after ``close()``: every call raises
    ``RuntimeError`` with confluent-kafka's words for the class."""

    def __init__(self, words: str) -> None:
        self._words = words

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise RuntimeError(self._words)


__all__ += ["ClosedClient"]


def check_sasl_credentials(username: Any, password: Any) -> None:
    """confluent-kafka's checks of ``set_sasl_credentials``'s arguments. trafka's
    clients keep logging in with the credentials they were made with (the
    migration page lists the difference)."""
    for i, value in enumerate((username, password), 1):
        if not isinstance(value, str):
            raise TypeError(f"argument {i} must be str, not {type(value).__name__}")


__all__ += ["check_sasl_credentials"]
