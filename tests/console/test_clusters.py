"""Several clusters in one console: two in-process brokerlites are two
clusters, each under /clusters/NAME/, the first at / as well; the protection
covers every cluster; a dead one answers 503 at once and slows no other; the
``trafka console`` command's --cluster options."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from console_helpers import (
    Client,
    FakeClock,
    Site,
    cells,
    console_in_thread,
    consoles_in_thread,
    create_topics,
    get,
    post,
    token_of,
)

from trafka.brokerlite.server import broker_in_thread
from trafka.console import ConsoleSettings
from trafka.console.access import decide_access
from trafka.sdk import NewTopic

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Site, Site]]:
    """Two single-broker clusters, each with a topic of its own."""
    with (
        broker_in_thread(data_dir=tmp_path_factory.mktemp("east"), port=0) as east,
        broker_in_thread(data_dir=tmp_path_factory.mktemp("west"), port=0) as west,
    ):
        a, b = Site("", east.bootstrap_servers), Site("", west.bootstrap_servers)
        create_topics(a, NewTopic("only-east", 1, 1))
        create_topics(b, NewTopic("only-west", 2, 1))
        yield a, b


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def topic_names(text: str) -> set[str]:
    return {row[0].split()[0] for row in cells(text, "topics")}


def test_each_cluster_under_its_name_and_the_first_at_the_root(two: tuple[Site, Site]) -> None:
    a, b = two
    names = {"east": a.bootstrap, "west": b.bootstrap}
    with consoles_in_thread(names, FakeClock()) as served:
        site = served.site
        east, west = get(site, "/clusters/east/topics"), get(site, "/clusters/west/topics")
        assert east.status == west.status == 200
        assert "only-east" in topic_names(east.text) and "only-west" not in topic_names(east.text)
        assert "only-west" in topic_names(west.text) and "only-east" not in topic_names(west.text)
        # The single-cluster URLs stay: the default (first) cluster's pages.
        root = get(site, "/topics")
        assert root.status == 200 and topic_names(root.text) == topic_names(east.text)
        # Links stay in their cluster; the switcher names both.
        assert 'href="/clusters/west/topics/only-west"' in west.text
        assert 'href="/topics/only-east"' in root.text
        assert 'href="/clusters/west/" class="here"' in west.text
        page = get(site, "/clusters/west/topics/only-west")
        assert page.status == 200 and cells(page.text, "partitions")[1][0] == "1"
        # An unknown cluster is a 404 page; the list of clusters says each one's state.
        assert get(site, "/clusters/west").url.endswith("/clusters/west/")
        missing = get(site, "/clusters/north/topics")
        assert missing.status == 404 and "no cluster named" in missing.text
        listed = cells(get(site, "/clusters").text, "cluster-list")
        assert [r[0].split()[0] for r in listed] == ["east", "west"]
        assert [r[1] for r in listed] == [a.bootstrap, b.bootstrap]


def test_a_dead_cluster_answers_503_and_the_others_serve(two: tuple[Site, Site]) -> None:
    a, _ = two
    names = {"east": a.bootstrap, "gone": f"127.0.0.1:{closed_port()}"}
    with consoles_in_thread(names, FakeClock()) as served:
        site = served.site
        dead = get(site, "/clusters/gone/topics")
        assert dead.status == 503 and "does not answer" in dead.text
        # While the dead one is being asked about again, the live one answers.
        started = time.monotonic()
        again = get(site, "/clusters/gone/")
        assert again.status == 503
        assert get(site, "/clusters/east/topics").status == 200
        assert get(site, "/").status == 200
        print(f"dead cluster's second page after {time.monotonic() - started:.3f} s")
        listed = {r[0].split()[0]: r[2] for r in cells(get(site, "/clusters").text, "cluster-list")}
        assert listed["gone"].startswith("down") and listed["east"] == "up"


def test_protection_covers_every_cluster(two: tuple[Site, Site]) -> None:
    a, b = two
    names = {"east": a.bootstrap, "west": b.bootstrap}
    password = decide_access("127.0.0.1", password="s3cret")
    with consoles_in_thread(names, FakeClock(), password) as served:
        site = served.site
        stranger = Client(follow=False)
        for path in ("/clusters/west/topics", "/clusters/east/", "/topics", "/clusters/north/"):
            answer = stranger.get(site, path)
            assert answer.status == 303 and "/login?next=" in answer.headers["location"]
        assert 'id="clusters"' not in stranger.get(site, "/login").text  # no names to strangers
        # A form of one cluster's page carries the session's token, which the
        # other cluster's changes take too; without it, refused.
        person = Client()
        form = person.get(site, "/login")
        person.post(site, "/login", {"password": "s3cret", "token": token_of(form)})
        token = token_of(person.get(site, "/clusters/east/topics/new"))
        refused = person.post(site, "/clusters/west/topics/new", {"name": "t-x", "token": "x"})
        assert refused.status == 403
        made = person.post(site, "/clusters/west/topics/new", {"name": "made-west", "token": token})
        assert made.status == 200 and made.url.endswith("/clusters/west/topics/made-west")
        assert "made-west" in topic_names(person.get(site, "/clusters/west/topics").text)
        assert "made-west" not in topic_names(person.get(site, "/clusters/east/topics").text)
        # Another site's form is refused on every cluster.
        forged = person.post(
            site, "/clusters/east/topics/new", {"name": "t-y", "token": token}, origin="http://evil"
        )
        assert forged.status == 403
    read_only = decide_access("127.0.0.1", read_only=True)
    with consoles_in_thread(names, FakeClock(), read_only) as served:
        for path in ("/clusters/west/topics/new", "/clusters/east/topics/new", "/topics/new"):
            assert get(served.site, path).status == 403
        assert post(served.site, "/clusters/west/topics/new", {"name": "z"}).status == 403


def test_serve_console_with_several_clusters(two: tuple[Site, Site]) -> None:
    a, b = two
    settings = ConsoleSettings(
        {"bootstrap.servers": a.bootstrap},
        listen="127.0.0.1:0",
        cluster_name="east",
        clusters={"west": {"bootstrap.servers": b.bootstrap}},
    )
    with console_in_thread(settings) as there:
        assert "only-west" in topic_names(get(there, "/clusters/west/topics").text)
        assert "only-east" in topic_names(get(there, "/topics").text)
    with pytest.raises(ValueError, match="named twice"):
        ConsoleSettings({}, cluster_name="x", clusters={"x": {}}).all_clusters()
    with pytest.raises(ValueError, match="cluster name"):
        ConsoleSettings({}, cluster_name="a/b").all_clusters()


def test_the_command_takes_clusters(monkeypatch: Any, tmp_path: Path) -> None:
    from trafka.tools import console_cli
    from trafka.tools.cli import main

    seen: list[ConsoleSettings] = []

    def stop_here(settings: ConsoleSettings) -> None:
        # The command checks its settings' access before it serves: stop there.
        seen.append(settings)
        raise click.exceptions.Exit(0)

    monkeypatch.setattr(console_cli, "access_of", stop_here)
    args = [
        "console",
        "--listen",
        "127.0.0.1:0",
        "--cluster",
        "east=127.0.0.1:9092",
        "--cluster",
        "west=10.0.0.1:9092,10.0.0.2:9092",
        "-X",
        "client.id=ops",
        "--cluster-property",
        "west:security.protocol=SSL",
    ]
    result = CliRunner().invoke(main, args, env={"TRAFKA_BOOTSTRAP_SERVERS": ""})
    assert result.exit_code == 0, result.output
    (settings,) = seen
    assert settings.cluster_name == "east"
    assert settings.client_config == {"client.id": "ops", "bootstrap.servers": "127.0.0.1:9092"}
    assert settings.clusters == {
        "west": {
            "client.id": "ops",
            "bootstrap.servers": "10.0.0.1:9092,10.0.0.2:9092",
            "security.protocol": "SSL",
        }
    }
    for bad, says in (
        (["--cluster", "east"], "NAME=HOST:PORT"),
        (["--cluster", "a/b=h:1"], "cluster name"),
        (["--cluster", "a=h:1", "--cluster", "a=h:2"], "given twice"),
        (["--cluster", "a=h:1", "--cluster-property", "b:x=y"], "naming a --cluster"),
        (["--cluster", "a=h:1", "-b", "h:2"], "give every cluster as --cluster"),
    ):
        result = CliRunner().invoke(main, ["console", *bad])
        assert result.exit_code == 2 and says in result.output, result.output
    assert console_cli.command.name == "console"
