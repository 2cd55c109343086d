"""Runs one ``trafka`` command again and again in this process, each time with
a SIGINT raised at another moment of its life, and prints how each run ended
(for tests/tools/test_cli_interrupts.py, which runs it as a process of its own:
SIGINT is the whole process's).

Usage: ``python interrupt_points.py RUNS trafka-arguments...``

A command's life is the ``trafka`` group's ``invoke``, from parsing the
subcommand to its return (what is outside it is click's own). Its moments are
the entries into a context manager's ``__exit__`` or ``__aexit__``: where a
KeyboardInterrupt raised by trio's own SIGINT handler used to leave a cancel
scope or task group open, trio's scope stack corrupted and the run ending on a
traceback. The signal is raised from a trace function at that moment, so that
the handler runs there, as a real Ctrl-C's does when it lands at that bytecode.

A first run without a signal counts the moments; then RUNS runs take moments
evenly spread over them, the last one included (trio's shutdown, after the
command's work). Each prints one JSON line: ``k`` (the moment), ``at`` (the
function the signal landed in; null when the run had fewer moments and ended
first), ``rc`` (the exit status, or what escaped ``main``) and ``err`` (stderr,
warnings and unraisable exceptions included, objects the run left collected
before the next run).
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import signal
import sys
import types
import warnings
from typing import Any

from trafka.tools.cli import LazyGroup, main

_MOMENTS = frozenset({"__exit__", "__aexit__"})
_INVOKE = LazyGroup.invoke.__code__


def run(args: list[str], k: int | None) -> dict[str, Any]:
    """One run of ``trafka args``, SIGINT raised at its k-th moment (never when None)."""
    state: dict[str, Any] = {"within": False, "moments": 0, "at": None}

    def in_invoke(frame: types.FrameType, event: str, arg: object) -> Any:
        if event == "return":  # the command's life is over
            sys.settrace(None)
            state["within"] = False
        return in_invoke

    def tracer(frame: types.FrameType, event: str, arg: object) -> Any:
        if event != "call":
            return None
        code = frame.f_code
        if code is _INVOKE and not state["within"]:
            state["within"] = True
            return in_invoke
        if state["within"] and code.co_name in _MOMENTS:
            state["moments"] += 1
            if state["moments"] == k:
                sys.settrace(None)
                state["at"] = f"{code.co_qualname} ({code.co_filename}:{frame.f_lineno})"
                signal.raise_signal(signal.SIGINT)
        return None

    err = io.StringIO()
    out = io.TextIOWrapper(io.BytesIO())  # consume writes to sys.stdout.buffer
    rc: int | str | None
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        sys.settrace(tracer)
        try:
            main.main(args, prog_name="trafka")
            rc = "returned"
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        except BaseException as exc:  # what escaped the command line (a bug, shown)
            rc = f"raised {exc!r}"
        finally:
            sys.settrace(None)
        gc.collect()  # what the run abandoned says so now, in its own stderr
    return {"k": k, "at": state["at"], "rc": rc, "err": err.getvalue(), "moments": state["moments"]}


def main_() -> None:
    runs, args = int(sys.argv[1]), sys.argv[2:]
    warnings.simplefilter("always")  # a coroutine never awaited is said every time
    run(args, None)  # imports and connections warm up
    gc.freeze()  # the collections after each run look only at what it made
    baseline = run(args, None)  # the command as it runs without a signal
    print(json.dumps(baseline), flush=True)
    total = baseline["moments"]
    ks = sorted({1 + (total - 1) * i // max(runs - 1, 1) for i in range(runs)})
    for k in ks:
        print(json.dumps(run(args, k)), flush=True)


if __name__ == "__main__":
    main_()
