"""Changing a topic from its page, over HTTP against the module's brokerlite:
its configs (which are the topic's own and which defaults; set, and reset to
the default), more partitions (never fewer, as Kafka), and deleting records
(DeleteRecords) of a partition or all, each checked with the admin client."""

from __future__ import annotations

import pytest
from console_helpers import Site, cells, create_topics, get, post, produce, run, token_of

from trafka.sdk import NewTopic, TopicPartition, open_admin

pytestmark = pytest.mark.timeout(120)


def overrides(site: Site, topic: str) -> dict[str, str | None]:
    async def go() -> dict[str, str | None]:
        async with open_admin(bootstrap_servers=site.bootstrap) as admin:
            found = await admin.describe_configs([topic], overrides_only=True)
        return found[topic]

    out: dict[str, str | None] = run(go)
    return out


def test_configs_show_overrides_and_change(site: Site) -> None:
    create_topics(site, NewTopic("tuned", 1, configs={"retention.ms": "60000"}))
    page = get(site, "/topics/tuned")
    rows = {r[0]: r[1:3] for r in cells(page.text, "configs")}
    assert rows["retention.ms"] == ["60000", "override"]
    assert rows["cleanup.policy"] == ["delete", "default"]
    token = token_of(page)

    changed = post(
        site,
        "/topics/tuned/configs",
        {"token": token, "set": "max.message.bytes=2000\nretention.ms=120000"},
    )
    assert changed.status == 200 and changed.url.endswith("/topics/tuned")
    rows = {r[0]: r[1:3] for r in cells(changed.text, "configs")}
    assert rows["retention.ms"] == ["120000", "override"]
    assert rows["max.message.bytes"] == ["2000", "override"]
    assert overrides(site, "tuned") == {"retention.ms": "120000", "max.message.bytes": "2000"}

    reset = post(site, "/topics/tuned/configs", {"token": token, "reset": "retention.ms"})
    assert reset.status == 200
    rows = {r[0]: r[1:3] for r in cells(reset.text, "configs")}
    assert rows["retention.ms"][1] == "default" and rows["retention.ms"][0] != "120000"
    assert overrides(site, "tuned") == {"max.message.bytes": "2000"}  # the other one stays

    refused = post(site, "/topics/tuned/configs", {"token": token, "set": "no.such.config=1"})
    assert refused.status == 502 and "INVALID_CONFIG" in refused.text
    both = post(
        site,
        "/topics/tuned/configs",
        {"token": token, "set": "max.message.bytes=1", "reset": "max.message.bytes"},
    )
    assert both.status == 400 and "set and reset at once" in both.text
    assert post(site, "/topics/absent/configs", {"token": token, "set": "a=1"}).status == 404


def test_add_partitions_only_grows(site: Site) -> None:
    create_topics(site, NewTopic("growing", 1))
    token = token_of(get(site, "/topics/growing"))
    grown = post(site, "/topics/growing/partitions", {"token": token, "count": "3"})
    assert grown.status == 200 and [r[0] for r in cells(grown.text, "partitions")] == [
        "0",
        "1",
        "2",
    ]
    shrink = post(site, "/topics/growing/partitions", {"token": token, "count": "2"})
    assert shrink.status == 400 and "has 3 partitions; give more" in shrink.text
    assert len(cells(get(site, "/topics/growing").text, "partitions")) == 3


def test_delete_records_of_a_partition_or_all(site: Site) -> None:
    create_topics(site, NewTopic("purged", 2))
    produce(site, "purged", [(None, b"p%d" % i, i % 2) for i in range(10)])
    token = token_of(get(site, "/topics/purged"))
    wrong = post(site, "/topics/purged/purge", {"token": token, "confirm": "other"})
    assert wrong.status == 400 and "type the topic&#39;s name (purged)" in wrong.text

    some = post(
        site,
        "/topics/purged/purge",
        {"token": token, "confirm": "purged", "partition": "0", "before": "3"},
    )
    assert some.status == 200
    # Partition, ..., log start, high watermark, messages.
    assert [(r[0], r[6], r[7], r[8]) for r in cells(some.text, "partitions")] == [
        ("0", "3", "5", "2"),
        ("1", "0", "5", "5"),
    ]
    everything = post(site, "/topics/purged/purge", {"token": token, "confirm": "purged"})
    assert [(r[6], r[7], r[8]) for r in cells(everything.text, "partitions")] == [
        ("5", "5", "0"),
        ("5", "5", "0"),
    ]

    async def starts() -> list[int]:
        async with open_admin(bootstrap_servers=site.bootstrap) as admin:
            found = await admin.list_offsets(
                {TopicPartition("purged", p): "earliest" for p in (0, 1)}
            )
        return [hit[0] for hit in found.values() if hit is not None]

    assert run(starts) == [5, 5]
    past = post(
        site,
        "/topics/purged/purge",
        {"token": token, "confirm": "purged", "partition": "1", "before": "99"},
    )
    assert past.status == 502 and "OFFSET_OUT_OF_RANGE" in past.text
