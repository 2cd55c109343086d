"""Resetting a consumer group's offsets and deleting a group, over HTTP against
the module's brokerlite, with Kafka's rules (kafka-consumer-groups
``--reset-offsets`` and ``--delete``): a plan first and nothing changed until
it is applied, offsets kept inside the log, and only an inactive group
(``Empty``) reset or deleted; an active one is refused with its state named."""

from __future__ import annotations

import pytest
import trio
from console_helpers import (
    Site,
    cells,
    consume_and_commit,
    create_topics,
    get,
    post,
    produce,
    run,
    token_of,
)

from trafka.sdk import NewTopic, open_admin, open_consumer

pytestmark = pytest.mark.timeout(120)


def committed(site: Site, group: str) -> dict[tuple[str, int], int]:
    async def go() -> dict[tuple[str, int], int]:
        async with open_admin(bootstrap_servers=site.bootstrap) as admin:
            found = await admin.list_consumer_group_offsets(group)
        return {(tp.topic, tp.partition): o for tp, o in found.items()}

    out: dict[tuple[str, int], int] = run(go)
    return out


def test_reset_shows_a_plan_then_applies_it(site: Site) -> None:
    create_topics(site, NewTopic("resettable", 2))
    produce(site, "resettable", [(None, b"r", i % 2) for i in range(10)])
    consume_and_commit(site, "reset-me", "resettable", 10)
    assert committed(site, "reset-me") == {("resettable", 0): 5, ("resettable", 1): 5}
    page = get(site, "/groups/reset-me")
    assert page.text.count('id="reset-offsets"') == 1
    assert "<title>Group reset-me · trafka console</title>" in page.text
    token = token_of(page)

    plan = post(site, "/groups/reset-me", {"token": token, "action": "reset", "to": "earliest"})
    assert plan.status == 200 and "Reset plan (nothing changed yet)" in plan.text
    assert [r[:4] for r in cells(plan.text, "reset-plan")] == [
        ["resettable", "0", "5", "0"],
        ["resettable", "1", "5", "0"],
    ]
    assert 'id="apply-reset"' in plan.text
    assert committed(site, "reset-me") == {("resettable", 0): 5, ("resettable", 1): 5}

    done = post(
        site,
        "/groups/reset-me",
        {"token": token, "action": "reset", "to": "earliest", "execute": "1"},
    )
    assert done.status == 200 and '<h2 id="reset-title">Offsets reset</h2>' in done.text
    assert committed(site, "reset-me") == {("resettable", 0): 0, ("resettable", 1): 0}
    assert [r[:5] for r in cells(done.text, "lag")] == [  # the page shows the new lag
        ["resettable", "0", "0", "5", "5"],
        ["resettable", "1", "0", "5", "5"],
    ]

    # One partition, to an offset past its end: moved to the end, and said so.
    one = post(
        site,
        "/groups/reset-me",
        {
            "token": token,
            "action": "reset",
            "topic": "resettable",
            "partition": "1",
            "to": "offset",
            "offset": "99",
            "execute": "1",
        },
    )
    assert [r for r in cells(one.text, "reset-plan")] == [
        ["resettable", "1", "0", "5", "99 is past the log end: set to 5"]
    ]
    assert committed(site, "reset-me") == {("resettable", 0): 0, ("resettable", 1): 5}

    # A time later than every message: the log end (Kafka's rule).
    late = post(
        site,
        "/groups/reset-me",
        {"token": token, "action": "reset", "to": "timestamp", "timestamp": "2999-01-01T00:00"},
    )
    assert {r[3] for r in cells(late.text, "reset-plan")} == {"5"}
    bad = post(site, "/groups/reset-me", {"token": token, "action": "reset", "to": "offset"})
    assert bad.status == 400 and "offset: give the offset to reset to" in bad.text


def test_an_active_group_is_neither_reset_nor_deleted(site: Site) -> None:
    create_topics(site, NewTopic("busy", 1))
    produce(site, "busy", [(None, b"b", 0)])
    consume_and_commit(site, "busy-group", "busy", 1)
    token = token_of(get(site, "/groups/busy-group"))

    async def go() -> tuple[str, str, str]:
        async with open_consumer(
            "busy", bootstrap_servers=site.bootstrap, group_id="busy-group"
        ) as consumer:
            while not consumer.assignment():
                await consumer.getmany(timeout_ms=200)
            page = await trio.to_thread.run_sync(get, site, "/groups/busy-group")
            reset = await trio.to_thread.run_sync(
                lambda: post(
                    site,
                    "/groups/busy-group",
                    {"token": token, "action": "reset", "to": "earliest", "execute": "1"},
                )
            )
            delete = await trio.to_thread.run_sync(
                lambda: post(
                    site,
                    "/groups/busy-group",
                    {"token": token, "action": "delete", "confirm": "busy-group"},
                )
            )
            assert reset.status == 400 and delete.status == 400
        return page.text, reset.text, delete.text

    page, reset, delete = run(go)
    assert 'id="reset-needs-inactive"' in page
    assert "offsets can be reset only when the group &#39;busy-group&#39; is inactive" in reset
    assert "but its state is Stable with 1 member" in reset
    assert "a group is deleted only when" in delete
    assert committed(site, "busy-group") == {("busy", 0): 1}  # untouched


def test_delete_an_inactive_group(site: Site) -> None:
    create_topics(site, NewTopic("done-with", 1))
    produce(site, "done-with", [(None, b"d", 0)])
    consume_and_commit(site, "old-group", "done-with", 1)
    token = token_of(get(site, "/groups/old-group"))
    wrong = post(site, "/groups/old-group", {"token": token, "action": "delete", "confirm": "x"})
    assert wrong.status == 400 and "type the group&#39;s id (old-group)" in wrong.text
    gone = post(
        site, "/groups/old-group", {"token": token, "action": "delete", "confirm": "old-group"}
    )
    assert gone.status == 200 and gone.url.endswith("/groups")
    assert "old-group" not in {r[0] for r in cells(gone.text, "groups")}
    assert get(site, "/groups/old-group").status == 404
    assert committed(site, "old-group") == {}
