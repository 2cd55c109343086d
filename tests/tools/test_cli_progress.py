"""trafka produce's progress line (no broker): shown at once, then at most
every 2 s (not a terminal), on a clock of any origin."""

from __future__ import annotations

import io

from trafka.tools.cli_client import _Progress


def test_the_first_line_shows_at_once_on_a_freshly_booted_machine() -> None:
    clock = [0.1]  # seconds since the machine booted
    err = io.StringIO()  # not a terminal: a line every 2 s
    progress = _Progress(None, True, clock=lambda: clock[0], err=err)
    clock[0] = 0.6
    progress.advance(5)
    assert err.getvalue() == "5 records, 0 bytes (10/s)\n"
    clock[0] = 2.5
    progress.advance(5)
    assert err.getvalue().count("\n") == 1  # 1.9 s after the last line
    clock[0] = 2.6
    progress.advance(5)
    assert err.getvalue().splitlines()[-1] == "15 records, 0 bytes (6/s)"
