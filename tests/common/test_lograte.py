"""RateLimitedLog: one line per key and interval, the rest counted; and the accept
loop that logs through it when accept() fails (out of file descriptors)."""

from __future__ import annotations

import errno
import logging
from typing import Any

import pytest
import trio
import trio.testing

from trafka.common.accept import accept_forever
from trafka.common.lograte import RateLimitedLog


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "test.lograte"]


def test_one_line_per_interval_then_the_count(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="test.lograte")
    quiet = RateLimitedLog(logging.getLogger("test.lograte"), clock=clock)
    assert quiet.warning("bad", "closing %s", "a")
    for i in range(1234):
        clock.now += 0.01
        assert not quiet.warning("bad", "closing %s", i)
    clock.now = 1000.0 + 61
    assert quiet.warning("bad", "closing %s", "b")
    assert messages(caplog) == ["closing a", "closing b (and 1234 more in the last 61 s)"]
    # A new window: nothing held back yet.
    clock.now += 60
    assert quiet.warning("bad", "closing %s", "c")
    assert messages(caplog)[-1] == "closing c"


def test_keys_are_limited_apart_and_levels_kept(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="test.lograte")
    quiet = RateLimitedLog(logging.getLogger("test.lograte"), clock=clock)
    assert quiet.warning(("frame", "10.0.0.1"), "x")
    assert quiet.warning(("frame", "10.0.0.2"), "y")
    assert quiet.error("disk", "z")
    assert not quiet.warning(("frame", "10.0.0.1"), "x")
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.WARNING, "x"),
        (logging.WARNING, "y"),
        (logging.ERROR, "z"),
    ]


def test_remembered_keys_are_bounded(clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="test.lograte")
    quiet = RateLimitedLog(logging.getLogger("test.lograte"), clock=clock, max_keys=3)
    for key in range(10):
        quiet.warning(key, "k%d", key)
    assert len(quiet._keys) == 3
    # The oldest were forgotten: they log again at once.
    assert quiet.warning(0, "k0 again")


def test_a_disabled_level_counts_nothing(clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="test.lograte")
    quiet = RateLimitedLog(logging.getLogger("test.lograte"), clock=clock)
    assert not quiet.warning("k", "hidden")
    assert not quiet._keys


class _OutOfDescriptors:
    """A listener whose accept() fails with EMFILE ``failures`` times, then waits."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    async def accept(self) -> Any:
        self.calls += 1
        if self.calls <= self.failures:
            raise OSError(errno.EMFILE, "Too many open files")
        await trio.sleep_forever()

    async def aclose(self) -> None:
        pass

    async def __aenter__(self) -> _OutOfDescriptors:
        return self

    async def __aexit__(self, *exc: object) -> None:
        pass


def test_accept_failures_are_logged_once_a_minute_without_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """trio.serve_listeners logs EMFILE with a traceback every 0.1 s; 2000 failures
    (200 s on trio's clock) here make 4 lines, each later one with its count."""
    caplog.set_level(logging.INFO, logger="test.lograte")
    listener = _OutOfDescriptors(2000)

    async def main() -> None:
        quiet = RateLimitedLog(logging.getLogger("test.lograte"), clock=trio.current_time)
        with trio.move_on_after(1000):
            await accept_forever(listener, lambda stream: None, quiet)  # type: ignore[arg-type]

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert listener.calls == 2001
    lines = [r for r in caplog.records if r.name == "test.lograte"]
    assert len(lines) == 4
    assert all(r.levelno == logging.ERROR and not r.exc_info for r in lines)
    assert "EMFILE" in lines[0].getMessage()
    assert "(and 599 more in the last 60 s)" in lines[1].getMessage()
