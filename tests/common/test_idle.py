"""The event loop's idle share (trafka.common.idle): Kafka's
NetworkProcessorAvgIdlePercent / RequestHandlerAvgIdlePercent, from I/O waits
fed with an injected clock."""

from __future__ import annotations

import pytest
import trio

from trafka.common.idle import IdleInstrument, IdleRatio


def test_the_share_of_time_spent_waiting() -> None:
    idle = IdleRatio(start=100.0, window=30.0)
    assert idle.ratio(100.0) is None  # no time yet
    idle.waited(100.0, 103.0)
    idle.waited(104.0, 110.0)
    assert idle.ratio(110.0) == pytest.approx(9 / 10)
    assert idle.ratio(120.0) == pytest.approx(9 / 20)  # 10 s busy since


def test_two_windows_are_kept_and_older_ones_dropped() -> None:
    idle = IdleRatio(start=0.0, window=10.0)
    idle.waited(0.0, 10.0)  # all of the first window
    idle.waited(10.0, 11.0)  # 1 s of the second
    assert idle.ratio(15.0) == pytest.approx(11 / 15)
    # At 25 s the first window is gone: 1 s idle of the 15 s since the second began.
    assert idle.ratio(25.0) == pytest.approx(1 / 15)
    # A wait across a window's end is shared, never more than the time it covers.
    idle.waited(28.0, 33.0)
    assert idle.ratio(35.0) == pytest.approx((2 + 3) / 15)
    # A long quiet stretch rolls every window; nothing waited means 0.
    assert idle.ratio(1000.0) == 0.0


def test_the_instrument_feeds_a_trio_loops_waits() -> None:
    readings = iter([5.0, 7.0, 8.0, 8.5])
    idle = IdleRatio(start=0.0, window=100.0)
    instrument = IdleInstrument(idle, lambda: next(readings))
    instrument.before_io_wait(1.0)
    instrument.after_io_wait(1.0)
    instrument.before_io_wait(0.0)
    instrument.after_io_wait(0.0)
    assert idle.ratio(10.0) == pytest.approx(2.5 / 10)

    async def sleep_a_little() -> None:
        ratio = IdleRatio(start=trio.current_time())
        trio.lowlevel.add_instrument(IdleInstrument(ratio, trio.current_time))
        await trio.sleep(0.05)
        share = ratio.ratio(trio.current_time())
        assert share is not None and 0.0 <= share <= 1.0

    trio.run(sleep_a_little)
