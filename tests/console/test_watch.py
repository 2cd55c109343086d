"""trafka.console.watch's rule for a page stopped by a failed check, in one trio
loop whose order the test sets (no clock, no sockets): the admin client's
DescribeCluster is a stand-in that fails or answers as told."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from trafka.console.health import ClusterHealth
from trafka.console.watch import ClusterDown, ClusterWatch
from trafka.sdk.errors import KafkaConnectionError


class _Admin:
    """DescribeCluster answers, or fails as a refused connection, as ``up`` says."""

    up = True

    async def describe_cluster(self, **_: Any) -> None:
        if not self.up:
            raise KafkaConnectionError("cannot connect to 127.0.0.1:1: refused")


def test_a_page_stopped_by_a_failed_check_says_why_though_the_next_one_answered() -> None:
    """The check fails and cancels the page's work; before the page's task runs
    again, the next check answers (the cluster was slow, not gone): the page
    still says what stopped it, the failed check's reason (in CI it raised an
    AssertionError instead, a 500 page)."""
    admin = _Admin()
    watch = ClusterWatch(admin, ClusterHealth(), "127.0.0.1:1")  # type: ignore[arg-type]
    seen: list[BaseException] = []

    async def page() -> None:
        try:
            await watch.while_reachable(trio.sleep_forever)
        except ClusterDown as exc:
            seen.append(exc)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(page)
            await trio.testing.wait_all_tasks_blocked()
            admin.up = False
            await watch.check_cluster()  # fails: the page's work is cancelled
            admin.up = True
            await watch.check_cluster()  # answers, before the page ran on
            assert not watch.health.down

    trio.run(main)
    assert len(seen) == 1 and seen[0].during
    assert "refused" in seen[0].reason


def test_a_page_refused_at_once_while_the_cluster_is_down() -> None:
    admin = _Admin()
    watch = ClusterWatch(admin, ClusterHealth(), "127.0.0.1:1")  # type: ignore[arg-type]

    async def main() -> None:
        admin.up = False
        await watch.check_cluster()
        with pytest.raises(ClusterDown) as down:
            await watch.while_reachable(trio.sleep_forever)
        assert not down.value.during

    trio.run(main)
