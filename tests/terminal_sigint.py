"""SIGINT for the children a test interrupts: as a terminal's foreground
process has it, whatever the suite inherited.

A child inherits an ignored or blocked SIGINT, and a suite started from a
script in the background (``nohup make test &``: a non-interactive shell starts
a background job with SIGINT ignored) would pass that on to every command a
test then interrupts, which would never see the signal (26 tests failed so).
A test that sends SIGINT to a child starts it with
``preexec_fn=sigint_as_at_a_terminal``; the suite itself keeps what it was
given (its starter ignored SIGINT on purpose).
"""

from __future__ import annotations

import signal

__all__ = ["sigint_as_at_a_terminal"]


def sigint_as_at_a_terminal() -> None:
    """Run in the child before it starts (``preexec_fn``): SIGINT handled by
    default and not blocked (Python then raises KeyboardInterrupt on it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
