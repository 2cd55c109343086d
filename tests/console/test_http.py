"""The console over HTTP against an in-process brokerlite (started with
``console_listen``): what each page says about the cluster, the forms that
change it, and the refusals (bad input, forged forms, unknown names) as pages
that say why, never a traceback."""

from __future__ import annotations

import html
import logging
import os
import re
import subprocess
import sys
import time

import pytest
import trio
from console_helpers import (
    Page,
    Site,
    cells,
    console_in_thread,
    consume_and_commit,
    create_topics,
    get,
    post,
    produce,
    record_parts,
    run,
    token_of,
)

from trafka.sdk import NewTopic, open_admin

pytestmark = pytest.mark.timeout(120)


def test_overview_names_the_broker_and_counts(site: Site) -> None:
    create_topics(site, NewTopic("ov-topic", 3))
    page = get(site, "/")
    assert page.status == 200
    (broker,) = cells(page.text, "brokers")
    assert broker[0] == "1" and broker[1] == "127.0.0.1" and broker[4] == "controller"
    assert int(broker[5]) >= 3  # it leads every partition
    assert broker[7].endswith("B") and " of " in broker[8]  # data, and disk free of total


def test_topics_list_and_detail_show_offsets_and_sizes(site: Site) -> None:
    create_topics(site, NewTopic("orders", 2))
    produce(site, "orders", [(b"k%d" % i, b"v" * 100, i % 2) for i in range(9)])
    page = get(site, "/topics")
    rows = {r[0]: r for r in cells(page.text, "topics")}
    assert rows["orders"][1:4] == ["2", "1", "9"]
    assert rows["orders"][4].endswith("B") and rows["orders"][4] != "-"
    assert not any(name.startswith("__") for name in rows)  # internal topics hidden

    detail = get(site, "/topics/orders")
    parts = cells(detail.text, "partitions")
    assert [(p[0], p[1], p[3], p[4], p[6], p[7], p[8]) for p in parts] == [
        ("0", "1", "1", "1", "0", "5", "5"),
        ("1", "1", "1", "1", "0", "4", "4"),
    ]
    assert all(p[9] != "-" for p in parts)  # sizes from DescribeLogDirs
    configs = {c[0]: c[1] for c in cells(detail.text, "configs")}
    assert "retention.ms" in configs


def test_message_browser_decodes_keys_values_and_headers(site: Site) -> None:
    create_topics(site, NewTopic("browse", 1))

    async def seed() -> None:
        from trafka.sdk import open_producer

        async with open_producer(bootstrap_servers=site.bootstrap) as producer:
            await producer.send("browse", b'{"id": 1, "ok": true}', key=b"json-key")
            await producer.send("browse", b"\x00\xffbinary", key=None, headers=[("trace", b"abc")])
            await producer.send("browse", "plain text é".encode())

    run(seed)
    page = get(site, "/topics/browse/messages?partition=0&start=beginning")
    assert page.status == 200
    assert "<title>Messages of browse · trafka console</title>" in page.text
    rows = cells(page.text, "messages")
    assert [r[1] for r in rows] == ["0", "1", "2"]
    # One line each (the key, the value compact, a count of headers), which
    # expands to the key, the value pretty-printed and the headers.
    records = record_parts(page.text)
    assert rows[0][3] == "json-key" and records[0][0] == '{"id": 1, "ok": true}'
    assert 'Value json{\n  "id": 1,\n  "ok": true\n}' in records[0][1]
    assert rows[1][3] == "null" and records[1][0] == "00 ff 62 69 6e 61 72 79"
    assert rows[1][5] == "1" and records[1][1].endswith("trace: textabc")
    assert records[2][0] == "plain text é" and rows[2][5] == "-"

    hexed = get(site, "/topics/browse/messages?start=offset&offset=2&decode=hex").text
    assert [r[1] for r in cells(hexed, "messages")] == ["2"]
    assert record_parts(hexed)[0][0].startswith("70 6c 61")

    newest = cells(get(site, "/topics/browse/messages?count=2").text, "messages")
    assert [r[1] for r in newest] == ["2", "1"]  # the newest first
    by_time = cells(
        get(site, "/topics/browse/messages?start=timestamp&timestamp=2000-01-01T00:00:00").text,
        "messages",
    )
    assert [r[1] for r in by_time] == ["0", "1", "2"]
    past = get(site, "/topics/browse/messages?start=offset&offset=999")
    assert "outside the log" in past.text and cells(past.text, "messages") == [
        ["No messages here."]
    ]


def test_message_browser_reads_every_partition_by_time(site: Site) -> None:
    create_topics(site, NewTopic("spread", 3))
    produce(site, "spread", [(None, b"m%d" % i, i % 3) for i in range(9)])
    page = get(site, "/topics/spread/messages?start=beginning")
    rows = cells(page.text, "messages")
    # In the order they were written (by timestamp, then partition and offset).
    assert sorted(line for line, _ in record_parts(page.text)) == sorted(f"m{i}" for i in range(9))
    stamps = [r[2] for r in rows]
    assert stamps == sorted(stamps)
    assert "3 partitions; 9 messages shown." in " ".join(page.text.split())
    newest = cells(get(site, "/topics/spread/messages?count=4").text, "messages")
    assert len(newest) == 4 and all(r[2] >= stamps[4] for r in newest)
    assert [r[2] for r in newest] == sorted((r[2] for r in newest), reverse=True)
    one = get(site, "/topics/spread/messages?partition=1&start=beginning").text
    assert [(r[0], r[1]) for r in cells(one, "messages")] == [("1", "0"), ("1", "1"), ("1", "2")]
    assert [line for line, _ in record_parts(one)] == ["m1", "m4", "m7"]


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("start=offset&offset=abc", "offset must be a whole number, got &#39;abc&#39;"),
        ("partition=7", "partitions 0 to 0, not 7"),
        ("count=100000", "count must be at most 500"),
        ("decode=rot13", "decode must be one of"),
        ("start=timestamp&timestamp=soon", "timestamp must be milliseconds or an ISO date-time"),
    ],
)
def test_bad_browser_input_is_a_clear_400(site: Site, query: str, says: str) -> None:
    create_topics(site, NewTopic(f"bad-{abs(hash(query))}", 1))
    page = get(site, f"/topics/bad-{abs(hash(query))}/messages?{query}")
    assert page.status == 400
    assert says in page.text and "Traceback" not in page.text


def test_unknown_names_are_404_pages(site: Site) -> None:
    for path in ("/topics/no-such-topic", "/topics/no-such-topic/messages", "/nowhere"):
        page = get(site, path)
        assert page.status == 404, path
        assert '<p class="error" id="error">' in page.text


def test_group_page_shows_lag_per_partition_and_a_chart(site: Site) -> None:
    create_topics(site, NewTopic("lagged", 2))
    produce(site, "lagged", [(None, b"x", i % 2) for i in range(15)])  # 8 to p0, 7 to p1
    consume_and_commit(site, "lag-group", "lagged", 15)
    produce(site, "lagged", [(None, b"y", 0) for _ in range(6)])
    first = get(site, "/groups/lag-group")
    assert first.status == 200
    assert [r[:5] for r in cells(first.text, "lag")] == [
        ["lagged", "0", "8", "14", "6"],
        ["lagged", "1", "7", "7", "0"],
    ]
    assert re.search(r'<b id="total-lag">6</b>', first.text)
    time.sleep(0.6)  # past LagHistory.min_gap: the next visit is a second sample
    second = get(site, "/groups/lag-group")
    assert '<svg id="lag-chart"' in second.text and "<polyline" in second.text
    groups = {r[0]: r for r in cells(get(site, "/groups").text, "groups")}
    assert groups["lag-group"][4:] == ["0", "6"]  # no member now; the last sample's lag
    # A page that reloads itself, for watching lag move.
    watched = get(site, "/groups/lag-group?refresh=10")
    assert '<meta http-equiv="refresh" content="10">' in watched.text
    assert "refresh" not in second.text.split("</head>")[0]
    for bad, says in (
        ("abc", "refresh must be a whole number"),
        ("1", "at least 2"),
        ("9999", "at most 3600"),
    ):
        page = get(site, f"/groups/lag-group?refresh={bad}")
        assert page.status == 400 and says in page.text


def test_create_produce_and_delete_topic_through_the_forms(site: Site) -> None:
    form = get(site, "/topics/new")
    token = token_of(form)
    made = post(
        site,
        "/topics/new",
        {"token": token, "name": "formed", "partitions": "3", "configs": "retention.ms=60000"},
    )
    assert made.status == 200 and made.url.endswith("/topics/formed")
    assert len(cells(made.text, "partitions")) == 3
    assert {c[0]: c[1] for c in cells(made.text, "configs")}["retention.ms"] == "60000"

    again = post(site, "/topics/new", {"token": token, "name": "formed"})
    assert again.status == 502 and "TOPIC_ALREADY_EXISTS" in again.text

    sent = post(
        site,
        "/topics/formed/produce",
        {
            "token": token,
            "partition": "2",
            "key": "k1",
            "value": '{"hello": "console"}',
            "headers": "source=form",
        },
    )
    assert sent.status == 200
    assert re.search(r"Written to partition 2 at offset 0\.", sent.text)
    shown = get(site, "/topics/formed/messages?partition=2&start=beginning").text
    rows = cells(shown, "messages")
    assert len(rows) == 1 and rows[0][5] == "1"
    ((line, full),) = record_parts(shown)
    assert "console" in line and full.endswith("source: textform")

    # A partition the topic lacks is the person's mistake; a topic that does not
    # exist is not created by producing to it (brokerlite creates on demand).
    beyond = post(site, "/topics/formed/produce", {"token": token, "partition": "3", "value": "x"})
    assert beyond.status == 400 and "has partitions 0 to 2, not 3" in beyond.text
    nowhere = post(site, "/topics/not-made/produce", {"token": token, "value": "x"})
    assert nowhere.status == 404 and get(site, "/topics/not-made/produce").status == 404
    assert get(site, "/topics/not-made").status == 404

    wrong = post(site, "/topics/formed/delete", {"token": token, "confirm": "other"})
    assert wrong.status == 400 and "type the topic&#39;s name" in wrong.text
    gone = post(site, "/topics/formed/delete", {"token": token, "confirm": "formed"})
    assert gone.status == 200 and gone.url.endswith("/topics")
    assert "formed" not in {r[0] for r in cells(gone.text, "topics")}


def test_forms_refuse_forged_or_malformed_posts(site: Site) -> None:
    token = token_of(get(site, "/topics/new"))
    fields = {"token": token, "name": "forged"}
    assert post(site, "/topics/new", {"name": "forged"}).status == 403  # no token
    assert post(site, "/topics/new", {**fields, "token": "guess"}).status == 403
    assert post(site, "/topics/new", fields, origin="http://evil.example").status == 403
    assert post(site, "/topics/new", fields, origin=None).status == 403
    assert post(site, "/topics/new", fields, content_type="text/plain").status == 415
    assert post(site, "/topics/new", {**fields, "name": "no spaces"}).status == 400
    assert post(site, "/topics/new", {**fields, "partitions": "many"}).status == 400
    assert get(site, "/topics/forged").status == 404  # nothing was created
    # A page asked for under another name (DNS rebinding) is refused.
    assert get(site, "/", headers={"Host": "attacker.example"}).status == 400


def test_acls_listed_created_and_deleted(site: Site) -> None:
    page = get(site, "/acls")
    assert page.status == 200 and cells(page.text, "acls") == [["No ACLs."]]
    token = token_of(page)
    acl = {
        "resource_type": "topic",
        "name": "secret",
        "pattern_type": "prefixed",
        "principal": "User:alice",
        "host": "*",
        "operation": "read",
        "permission": "deny",
    }
    made = post(site, "/acls", {"token": token, **acl})
    assert made.status == 200
    assert cells(made.text, "acls")[0][:7] == [
        "topic",
        "secret",
        "prefixed",
        "User:alice",
        "*",
        "read",
        "deny",
    ]
    bad = post(site, "/acls", {"token": token, **acl, "principal": "alice"})
    assert bad.status == 400 and "principal must be Type:name" in bad.text
    gone = post(site, "/acls/delete", {"token": token, **acl})
    assert gone.status == 200 and cells(gone.text, "acls") == [["No ACLs."]]


def test_cli_console_serves_a_cluster(site: Site, tmp_path: object) -> None:
    """``trafka console`` in its own process, against the shared broker; with
    ``--access-log`` each request is a line in the combined log format (Common
    Log Format, then referrer and user agent), stamped as every line is."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trafka.tools.cli",
            "console",
            "-b",
            site.bootstrap,
            "--listen",
            f"127.0.0.1:{port}",
            "--access-log",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        there = site._replace(base=f"http://127.0.0.1:{port}")
        deadline = time.monotonic() + 30
        while True:
            try:
                page = get(there, "/topics")
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
                assert time.monotonic() < deadline, "the console did not come up"
                time.sleep(0.2)
        assert page.status == 200 and '<table id="topics">' in page.text
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err.decode()
    assert f"trafka console on http://127.0.0.1:{port}/" in err.decode()
    when = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}"
    clf = r'127\.0\.0\.1 - - \[\d\d/\w{3}/\d{4}:\d\d:\d\d:\d\d [+-]\d{4}\] "GET /topics HTTP/1\.1" 200 \d+ '
    line = rf'^{when} INFO trafka\.console\.access: {clf}"-" "Python-urllib/[\d.]+"$'
    found = re.findall(line, err.decode(), re.MULTILINE)
    assert len(found) == 1, err.decode()  # the one page asked for, once


def test_no_access_log_unless_asked(site: Site, caplog: pytest.LogCaptureFixture) -> None:
    """The access log is off by default: pages served, no line. On, a field a
    client sends cannot end its field or forge a line: quotes are escaped."""
    import dataclasses

    from trafka.console import ConsoleSettings

    caplog.set_level(logging.DEBUG, logger="trafka.console")
    settings = ConsoleSettings({"bootstrap.servers": site.bootstrap}, "127.0.0.1:0")
    assert settings.access_log is False
    with console_in_thread(settings) as there:
        assert get(there, "/topics").status == 200
    assert [r for r in caplog.records if r.name == "trafka.console.access"] == []
    with console_in_thread(dataclasses.replace(settings, access_log=True)) as there:
        agent = {"User-Agent": 'x" 200 1 "forged'}
        assert get(there, "/topics?filter=a%22b", headers=agent).status == 200
    (line,) = [r.getMessage() for r in caplog.records if r.name == "trafka.console.access"]
    assert re.fullmatch(
        r'127\.0\.0\.1 - - \[[^]]+\] "GET /topics\?filter=a%22b HTTP/1\.1" 200 \d+ "-" '
        r'"x\\" 200 1 \\"forged"',
        line,
    ), line


def test_cli_console_refuses_a_bad_listen_address() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "trafka.tools.cli", "console", "--listen", "nowhere"],
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 2 and b"HOST:PORT" in done.stderr


def test_cli_console_refuses_a_setting_without_a_value() -> None:
    from click.testing import CliRunner

    from trafka.tools.console_cli import command

    result = CliRunner().invoke(command, ["--listen", "127.0.0.1:0", "-X", "acks"])
    assert result.exit_code == 2 and "'acks' is not key=value" in result.output


def test_admin_view_matches_what_the_cluster_says(site: Site) -> None:
    """The overview's partition count is the admin client's own."""

    async def count() -> int:
        async with open_admin(bootstrap_servers=site.bootstrap) as admin:
            return sum((await admin.list_topics(include_internal=True)).values())

    total = run(count)
    page = get(site, "/")
    assert re.search(rf"<b>{total:,}</b>partitions", page.text)


def test_the_sampler_records_lag_without_visits(site: Site) -> None:
    """A console of its own with a short sampling interval: the groups list shows
    a lag nobody opened the group's page for, and its chart has points."""
    import trio

    from trafka.console import ConsoleSettings, serve_console

    create_topics(site, NewTopic("sampled", 1))
    produce(site, "sampled", [(None, b"s", 0) for _ in range(5)])
    consume_and_commit(site, "sampled-group", "sampled", 5)
    produce(site, "sampled", [(None, b"t", 0) for _ in range(3)])

    async def go() -> tuple[str, str]:
        settings = ConsoleSettings({"bootstrap.servers": site.bootstrap}, "127.0.0.1:0", 0.5)
        async with trio.open_nursery() as nursery:
            host, port = await nursery.start(serve_console, settings)
            there = site._replace(base=f"http://{host}:{port}")
            while True:  # until a round of the sampler has seen the group
                groups = await trio.to_thread.run_sync(get, there, "/groups")
                if "sampled-group" in groups.text and ">3</td>" in groups.text:
                    break
                await trio.sleep(0.2)
            await trio.sleep(0.6)  # the visit below is a second sample
            group = await trio.to_thread.run_sync(get, there, "/groups/sampled-group")
            nursery.cancel_scope.cancel()
        return groups.text, group.text

    groups, group = run(go)
    rows = {r[0]: r for r in cells(groups, "groups")}
    assert rows["sampled-group"][5] == "3"
    assert '<svg id="lag-chart"' in group


def test_trafka_broker_console_listen(tmp_path: object) -> None:
    """``trafka broker --console-listen`` serves the console for itself."""
    import socket

    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    kafka, http = ports
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trafka.tools.cli",
            "broker",
            "--listen",
            f"127.0.0.1:{kafka}",
            "--data-dir",
            str(tmp_path),
            "--console-listen",
            f"127.0.0.1:{http}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    there = Site(f"http://127.0.0.1:{http}", f"127.0.0.1:{kafka}")
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                page = get(there, "/")
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
                assert time.monotonic() < deadline, "the console did not come up"
                time.sleep(0.2)
        assert page.status == 200
        (broker,) = cells(page.text, "brokers")
        assert broker[1:3] == ["127.0.0.1", str(kafka)] and broker[4] == "controller"
        acls = get(there, "/acls")  # this broker has no authorizer
        assert acls.status == 200 and 'id="no-authorizer"' in acls.text
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()


def test_share_group_page_shows_start_offsets_and_lag(site: Site) -> None:
    from click.testing import CliRunner

    from trafka.tools.cli import main

    def cli(*args: str, input: bytes | None = None) -> str:
        result = CliRunner().invoke(main, [*args, "-b", site.bootstrap], input=input)
        assert result.exit_code == 0, (result.output, result.exception)
        return result.stdout

    create_topics(site, NewTopic("jobs", 1))
    produce(site, "jobs", [(None, b"job-%d" % i, 0) for i in range(10)])
    cli("groups", "set-config", "workers", "share.auto.offset.reset=earliest")
    assert (
        cli("share-consume", "jobs", "-G", "workers", "-c", "4") == "job-0\njob-1\njob-2\njob-3\n"
    )
    page = get(site, "/groups/workers")
    assert page.status == 200
    assert '<th class="n">Start offset</th>' in page.text
    assert [r[:5] for r in cells(page.text, "lag")] == [["jobs", "0", "4", "10", "6"]]
    assert re.search(r'<b id="total-lag">6</b>', page.text)
    listed = {r[0]: r for r in cells(get(site, "/groups").text, "groups")}
    assert listed["workers"][1] == "share"


def test_a_group_that_does_not_exist_is_a_404(site: Site) -> None:
    page = get(site, "/groups/never-seen")
    assert page.status == 404 and "no group named &#39;never-seen&#39;" in page.text


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_live_member_and_its_assignment(site: Site, protocol: str) -> None:
    """A member still in the group (classic, or KIP-848's consumer protocol) is
    listed with its client id and the partitions it was assigned."""
    import trio

    from trafka.sdk import open_consumer

    topic, group = f"live-{protocol}", f"live-group-{protocol}"
    create_topics(site, NewTopic(topic, 2))

    async def go() -> str:
        async with open_consumer(
            topic,
            bootstrap_servers=site.bootstrap,
            group_id=group,
            group_protocol=protocol,
            client_id=f"reader-{protocol}",
        ) as consumer:
            while len(consumer.assignment()) < 2:
                await consumer.getmany(timeout_ms=200)
            page = await trio.to_thread.run_sync(get, site, f"/groups/{group}")
        assert page.status == 200
        return page.text

    text = run(go)
    (member,) = cells(text, "members")
    assert member[2] == f"reader-{protocol}"
    assert member[4] == f"{topic}-0, {topic}-1"
    assert [r[:2] + r[6:] for r in cells(text, "lag")] == [
        [topic, "0", f"reader-{protocol}"],
        [topic, "1", f"reader-{protocol}"],
    ]


def test_messages_sort_by_partition_offset_or_timestamp(site: Site) -> None:
    """The page's rows sort by a column, either way (ties by partition, then
    offset); the column links carry the rest of the query; a sort the page
    does not have is a 400 that names it."""
    create_topics(site, NewTopic("sorted", 3))
    produce(site, "sorted", [(None, b"s%d" % i, (2 * i) % 3) for i in range(9)])
    base = "/topics/sorted/messages?start=beginning&count=9"

    def rows(query: str) -> list[tuple[int, int, str]]:
        return [
            (int(r[0]), int(r[1]), r[2]) for r in cells(get(site, base + query).text, "messages")
        ]

    every = rows("")
    assert len(every) == 9
    assert rows("&sort=partition") == sorted(every)
    assert rows("&sort=partition&order=desc") == sorted(every, reverse=True)
    assert rows("&sort=offset") == sorted(every, key=lambda r: (r[1], r[0]))
    assert rows("&sort=timestamp&order=desc") == sorted(
        every, key=lambda r: (r[2], r[0], r[1]), reverse=True
    )
    page = get(site, base + "&sort=offset").text
    link = re.search(r'<a href="([^"]+)" class="sort" id="sort-offset">', page)
    assert link is not None
    assert html.unescape(link.group(1)) == "?start=beginning&count=9&sort=offset&order=desc"
    bad = get(site, base + "&sort=key")
    assert bad.status == 400 and "sort must be one of partition, offset, timestamp" in bad.text


def test_partitions_without_a_commit_are_shown_and_the_total_says_so(site: Site) -> None:
    """A live member assigned two partitions has committed one: the other's
    committed offset and lag read "no commit" (kafka-consumer-groups shows
    "-"; where the member starts depends on its auto.offset.reset), and the
    total lag says it leaves that partition out, rather than dropping it
    silently. The groups list shows the group's one member and the same."""
    from trafka.sdk import TopicPartition, open_consumer

    create_topics(site, NewTopic("half-committed", 2))
    produce(site, "half-committed", [(None, b"h", i % 2) for i in range(10)])  # 5 each
    pages: dict[str, Page] = {}

    async def go() -> None:
        async with open_consumer(
            "half-committed",
            bootstrap_servers=site.bootstrap,
            group_id="half",
            enable_auto_commit=False,
        ) as consumer:
            while len(consumer.assignment()) < 2:
                await consumer.getmany(timeout_ms=200)
            await consumer.commit({TopicPartition("half-committed", 0): 2})
            for path in ("/groups/half", "/groups"):
                pages[path] = await trio.to_thread.run_sync(get, site, path)

    run(go)
    group = pages["/groups/half"].text
    assert [r[:5] for r in cells(group, "lag")] == [
        ["half-committed", "0", "2", "5", "3"],
        ["half-committed", "1", "no commit", "5", "no commit"],
    ]
    assert re.search(r'<b id="total-lag">3</b>', group)
    assert 'id="lag-excludes">not counting 1 partition with no commit<' in group
    listed = {r[0]: r for r in cells(pages["/groups"].text, "groups")}
    assert listed["half"][4:] == ["1", "3 + 1 no commit"]
