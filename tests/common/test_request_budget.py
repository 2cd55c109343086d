"""RequestBudget (queued.max.request.bytes), without sockets: grants within the
limit, a frame larger than the limit alone, first come first served."""

from __future__ import annotations

from trafka.common.request_budget import RequestBudget


def test_grants_within_the_limit_and_queues_the_rest() -> None:
    budget = RequestBudget(100)
    assert budget.reserve("a", 60)
    assert not budget.reserve("b", 60)
    assert budget.used == 60 and budget.waiting == 1
    assert budget.release(60) == ["b"]
    assert budget.used == 60 and budget.waiting == 0


def test_a_frame_larger_than_the_budget_goes_alone() -> None:
    budget = RequestBudget(100)
    assert budget.reserve("huge", 500)
    assert not budget.reserve("small", 1)
    assert budget.release(500) == ["small"]
    assert not budget.reserve("huge again", 500)
    assert budget.release(1) == ["huge again"]
    assert budget.used == 500


def test_first_come_first_served() -> None:
    budget = RequestBudget(100)
    assert budget.reserve("a", 50)
    assert not budget.reserve("big", 80)
    # Would fit, but "big" asked first.
    assert not budget.reserve("small", 10)
    assert budget.release(50) == ["big", "small"]
    assert budget.used == 90


def test_a_cancelled_waiter_lets_the_next_through() -> None:
    budget = RequestBudget(100)
    assert budget.reserve("a", 50)
    assert not budget.reserve("big", 80)
    assert not budget.reserve("small", 10)
    assert budget.cancel("big") == ["small"]
    assert budget.used == 60 and budget.waiting == 0


def test_no_limit() -> None:
    budget = RequestBudget(None)
    assert all(budget.reserve(i, 1 << 30) for i in range(10))
