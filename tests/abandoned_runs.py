"""A trio run a timed-out test left behind is ended, so the next test's
``trio.run`` works (a pytest plugin; ``tests/conftest.py`` loads it).

pytest-timeout (its default ``signal`` method) raises its failure from a SIGALRM
handler, wherever the main thread is. A hung ``trio.run`` is nearly always
waiting for I/O (``io_manager.get_events``), which is outside the generator that
holds the run's state (``trio._core._run.unrolled_run``): the failure leaves
``trio.run`` without closing that generator, and the traceback pytest keeps
holds the generator alive. Its ``finally`` (which clears ``GLOBAL_RUN_CONTEXT``
and closes the I/O manager, the signal wake-up fd and the async generator hooks)
never ran, so every later ``trio.run`` of that process failed with "Attempted
to call run() from inside a run()": one hang in an xdist worker failed all the
tests of its file that followed.

After any test phase that failed, each run found suspended in the failure's
tracebacks is finished: everything in it is cancelled and the loop driven on
until it ends (its tasks close their sockets and nurseries as on any
cancellation), for :data:`FINISH_S` seconds at most; a run still going then
(a task that ignores cancellation) has its generator closed, which runs that
``finally`` all the same (its tasks are then left to the garbage collector).
"""

from __future__ import annotations

import time
import warnings
from types import FrameType, TracebackType
from typing import Any

import pytest

#: Seconds an abandoned run gets to end once cancelled.
FINISH_S = 10.0


def _finish(frame: FrameType) -> bool:
    """End the run whose ``trio.run`` frame this is, if it is still suspended."""
    from sniffio import thread_local

    gen = frame.f_locals.get("gen")
    runner = frame.f_locals.get("runner")
    if gen is None or runner is None or gen.gi_frame is None or gen.gi_running:
        return False
    deadline = time.monotonic() + FINISH_S
    library, thread_local.name = thread_local.name, "trio"  # as trio.run has it
    try:
        if runner.system_nursery is not None:
            runner.system_nursery.cancel_scope.cancel()
        wait = 0.0
        while time.monotonic() < deadline:
            wait = gen.send(runner.io_manager.get_events(min(wait, 0.1)))
    except StopIteration:
        pass  # the run ended: its own cleanup ran
    finally:
        thread_local.name = library
        if gen.gi_frame is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # "guest run got abandoned"
                gen.close()
    return True


def finish_abandoned_runs(error: BaseException) -> int:
    """Finish every trio run that a frame of ``error``'s traceback left suspended,
    and those of the exceptions it came from or holds; how many there were."""
    import trio

    run_code = trio.run.__code__
    finished = 0
    seen: set[int] = set()
    todo = [error]
    while todo:
        exc = todo.pop()
        if id(exc) in seen:
            continue
        seen.add(id(exc))
        tb: TracebackType | None = exc.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code is run_code and _finish(tb.tb_frame):
                finished += 1
            tb = tb.tb_next
        todo += [e for e in (exc.__cause__, exc.__context__) if e is not None]
        if isinstance(exc, BaseExceptionGroup):
            todo += exc.exceptions
    return finished


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> None:
    if call.excinfo is not None:
        finish_abandoned_runs(call.excinfo.value)
