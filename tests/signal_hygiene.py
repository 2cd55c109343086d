"""A test that leaves its process with SIGINT ignored or blocked errors (a pytest
plugin; ``tests/conftest.py`` loads it).

A child process inherits both: one started after such a test (a ``trafka``
command, a broker) never sees Ctrl-C. One whole-suite run failed every SIGINT
test of one xdist worker so, after 120 s each, while each passed alone; the test
that had left the worker so was not found. From then on the test that does it is
named: its teardown errors with what it changed, and the state it found is put
back so that the tests after it run as they would have.
"""

from __future__ import annotations

import signal
from typing import Any

import pytest

_FOUND = pytest.StashKey[tuple[Any, bool]]()


def _sigint_state() -> tuple[Any, bool]:
    """SIGINT's handler and whether this thread blocks it."""
    return (
        signal.getsignal(signal.SIGINT),
        signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []),
    )


def _ignored_or_blocked(state: tuple[Any, bool]) -> bool:
    return state[0] is signal.SIG_IGN or state[1]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_FOUND] = _sigint_state()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    result = yield
    found = item.stash.get(_FOUND, None)
    now = _sigint_state()
    if found is None or _ignored_or_blocked(found) or not _ignored_or_blocked(now):
        return result
    signal.signal(signal.SIGINT, found[0])
    if not found[1]:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
    what = "ignored" if now[0] is signal.SIG_IGN else "blocked"
    raise pytest.fail.Exception(
        f"this test (or a fixture it ended) left the process with SIGINT {what}: "
        "every child started after it would not see Ctrl-C (put back as found)",
        pytrace=False,
    )
