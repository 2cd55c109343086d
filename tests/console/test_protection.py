"""Who may use a console, over plain HTTP against consoles of their own (on a
thread) for the module's brokerlite: the password login and its refusals, the
session cookie, the per-session form token and the origin check, a read-only
console refusing changes on the server, the default read-only of an open
console off loopback, and a reverse proxy's identity header."""

from __future__ import annotations

import re

import pytest
from console_helpers import (
    Client,
    Site,
    console_in_thread,
    create_topics,
    served_in_thread,
    token_of,
)

from trafka.console import ConsoleSettings
from trafka.sdk import NewTopic

pytestmark = pytest.mark.timeout(120)

PASSWORD = "correct horse battery staple"


def settings(site: Site, listen: str = "127.0.0.1:0", **kwargs: object) -> ConsoleSettings:
    return ConsoleSettings({"bootstrap.servers": site.bootstrap}, listen, **kwargs)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def locked(site: Site) -> object:
    """A console that asks for a password."""
    with console_in_thread(settings(site, password=PASSWORD)) as there:
        yield there


def login(client: Client, there: Site, password: str, next_page: str = "/") -> object:
    form = client.get(there, "/login")
    return client.post(
        there, "/login", {"token": token_of(form), "password": password, "next": next_page}
    )


def test_a_password_console_sends_strangers_to_log_in(locked: Site) -> None:
    stranger = Client(follow=False)
    for path in ("/", "/topics", "/groups/g", "/acls"):
        page = stranger.get(locked, path)
        assert page.status == 303, path
        assert page.headers["Location"].startswith("/login?next=")
    assert stranger.get(locked, "/topics?internal=1").headers["Location"] == (
        "/login?next=%2Ftopics%3Finternal%3D1"
    )
    # A change without a login is refused outright, token or not.
    page = stranger.post(locked, "/topics/new", {"token": "x", "name": "t"})
    assert page.status == 401 and "log in first" in page.text
    assert stranger.get(locked, "/healthz").status == 200


def test_a_wrong_password_is_refused_and_a_right_one_opens_a_session(
    site: Site, locked: Site
) -> None:
    client = Client()
    refused = login(client, locked, "correct horse battery stapler", "/topics")
    assert refused.status == 401 and "wrong password" in refused.text
    assert "correct horse" not in refused.text
    assert Client(follow=False).get(locked, "/topics").status == 303  # still nobody
    before = {c.name: c.value for c in client.jar}

    watcher = Client(follow=False)
    form = watcher.get(locked, "/login")
    answer = watcher.post(
        locked, "/login", {"token": token_of(form), "password": PASSWORD, "next": "/topics"}
    )
    assert answer.status == 303 and answer.headers["Location"] == "/topics"
    cookie = answer.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=lax" in cookie and "Path=/" in cookie
    port = locked.base.rsplit(":", 1)[1]
    assert cookie.startswith(f"trafka_console_{port}=")

    # The session id after the login is a new one, not the one known before it.
    ok = login(client, locked, PASSWORD, "/topics")
    assert ok.status == 200 and ok.url.endswith("/topics") and '<table id="topics">' in ok.text
    after = {c.name: c.value for c in client.jar}
    assert after.keys() == before.keys() and after != before
    assert 'id="logout"' in ok.text

    # Logging out ends the session; the old cookie opens nothing.
    token = token_of(ok)
    out = client.post(locked, "/logout", {"token": token})
    assert out.status == 200 and out.url.endswith("/login")
    thief = Client(follow=False)
    for name, value in after.items():
        thief.jar.set_cookie(_cookie(name, value))
    assert thief.get(locked, "/topics").status == 303


def _cookie(name: str, value: str) -> object:
    import http.cookiejar

    return http.cookiejar.Cookie(
        0, name, value, None, False, "127.0.0.1", False, False, "/", True, False, None,
        True, None, None, {},
    )  # fmt: skip


def test_form_tokens_are_per_session_and_checked(site: Site, locked: Site) -> None:
    alice, bob = Client(), Client()
    alices = token_of(login(alice, locked, PASSWORD, "/topics/new"))
    bobs = token_of(login(bob, locked, PASSWORD, "/topics/new"))
    assert alices != bobs
    fields = {"name": "made-by-token"}
    # Without a token, with a guess, or with another session's: refused.
    assert alice.post(locked, "/topics/new", fields).status == 403
    assert alice.post(locked, "/topics/new", {**fields, "token": "guess"}).status == 403
    refused = alice.post(locked, "/topics/new", {**fields, "token": bobs})
    assert refused.status == 403 and "token is missing or stale" in refused.text
    # From another site's page, even with the right token.
    evil = alice.post(locked, "/topics/new", {**fields, "token": alices}, origin="http://evil.test")
    assert evil.status == 403 and "console&#39;s own pages" in evil.text
    assert alice.get(locked, "/topics/made-by-token").status == 404  # nothing made
    made = alice.post(locked, "/topics/new", {**fields, "token": alices})
    assert made.status == 200 and made.url.endswith("/topics/made-by-token")


def test_an_open_console_gives_each_browser_its_own_token(site: Site) -> None:
    with console_in_thread(settings(site)) as there:
        one, two = Client(), Client()
        first, second = one.get(there, "/topics/new"), two.get(there, "/topics/new")
        assert first.status == second.status == 200
        assert token_of(first) != token_of(second)
        taken = one.post(there, "/topics/new", {"token": token_of(second), "name": "stolen"})
        assert taken.status == 403
        # A browser without the cookie (a forged form from elsewhere) is refused.
        bare = Client().post(there, "/topics/new", {"token": token_of(first), "name": "stolen"})
        assert bare.status == 403
        assert one.get(there, "/topics/stolen").status == 404


def test_a_read_only_console_refuses_changes_on_the_server(site: Site) -> None:
    create_topics(site, NewTopic("kept", 1))
    with console_in_thread(settings(site, read_only=True)) as there:
        client = Client()
        topic = client.get(there, "/topics/kept")
        assert topic.status == 200
        assert 'id="read-only"' in topic.text and "started read-only" in topic.text
        # No form to change anything is offered...
        assert 'id="delete-topic"' not in topic.text and "/produce" not in topic.text
        assert 'method="post"' not in topic.text  # no configs, partitions or purge form
        assert "Create a topic" not in client.get(there, "/topics").text
        token = token_of(topic)  # this session's valid token
        # ...and none is accepted, token and origin right or not.
        for path, fields in (
            ("/topics/kept/produce", {"value": "x"}),
            ("/topics/kept/delete", {"confirm": "kept"}),
            ("/topics/new", {"name": "never"}),
            ("/acls", {"resource_type": "topic", "name": "kept", "principal": "User:x"}),
            ("/topics/kept/configs", {"set": "retention.ms=1"}),
            ("/topics/kept/partitions", {"count": "2"}),
            ("/topics/kept/purge", {"confirm": "kept"}),
            ("/groups/any", {"action": "delete", "confirm": "any"}),
        ):
            page = client.post(there, path, {"token": token, **fields})
            assert page.status == 403, path
            assert "<h1>Read-only</h1>" in page.text
        for path in ("/topics/kept/produce", "/topics/new"):
            assert client.get(there, path).status == 403
        # Reading still works.
        assert client.get(there, "/topics/kept/messages").status == 200
        assert client.get(there, "/topics/never").status == 404
    messages = Client().get(site, "/topics/kept/messages?start=beginning")
    assert "No messages here." in messages.text  # nothing was produced


def test_an_open_console_off_loopback_is_read_only_and_says_why(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    """The safe default: listening on every interface without a password or a
    proxy header, the console only shows the cluster."""
    with console_in_thread(settings(site, "0.0.0.0:0")) as there:
        client = Client()
        page = client.get(there, "/")
        assert page.status == 200
        banner = re.search(r'<p class="banner" id="read-only">(.*?)</p>', page.text, re.DOTALL)
        assert banner and "listens on 0.0.0.0 with neither a password" in banner.group(1)
        token = token_of(page)
        produce = client.post(there, "/topics/x/produce", {"token": token, "value": "v"})
        assert produce.status == 403 and "listens on 0.0.0.0" in produce.text
    assert "the console is read-only: this console listens on 0.0.0.0" in caplog.text
    with console_in_thread(settings(site, "0.0.0.0:0", password=PASSWORD)) as there:
        client = Client()
        assert 'id="read-only"' not in login(client, there, PASSWORD).text


def test_a_proxy_header_names_the_person_from_the_proxy_only(site: Site) -> None:
    with console_in_thread(settings(site, auth_header="X-Forwarded-User")) as there:
        client = Client()
        page = client.get(there, "/topics", headers={"X-Forwarded-User": "alice@example"})
        assert (
            page.status == 200 and '<span class="who" id="user">alice@example</span>' in page.text
        )
        nobody = client.get(there, "/topics")
        assert nobody.status == 401 and "x-forwarded-user header" in nobody.text
        # The token is the person's: another name in the header does not take it.
        new = client.get(there, "/topics/new", headers={"X-Forwarded-User": "alice@example"})
        fields = {"token": token_of(new), "name": "by-header"}
        mallory = client.post(there, "/topics/new", fields, headers={"X-Forwarded-User": "mallory"})
        assert mallory.status == 403
    trusted = ("10.9.9.9",)  # the proxy is elsewhere: loopback's header is anyone's
    with console_in_thread(
        settings(site, auth_header="X-Forwarded-User", trusted_proxies=trusted)
    ) as there:
        page = Client().get(there, "/topics", headers={"X-Forwarded-User": "alice"})
        assert page.status == 401


def test_the_command_never_takes_a_password_on_its_command_line(tmp_path: object) -> None:
    from pathlib import Path

    from click.testing import CliRunner

    from trafka.tools.console_cli import command

    runner = CliRunner()
    given = runner.invoke(command, ["--listen", "127.0.0.1:0", "--password", "hunter2"])
    assert given.exit_code == 2
    assert "visible to every user" in given.output and "TRAFKA_CONSOLE_PASSWORD" in given.output
    missing = runner.invoke(command, ["--password-file", str(Path(str(tmp_path)) / "nope")])
    assert missing.exit_code == 2 and "cannot read the password file" in missing.output
    empty = Path(str(tmp_path)) / "empty"
    empty.write_text("")
    refused = runner.invoke(command, ["--password-file", str(empty)])
    assert refused.exit_code == 2 and "is empty" in refused.output
    header = runner.invoke(command, ["--auth-header", "X User"])
    assert header.exit_code == 2 and "not a header name" in header.output
    both = runner.invoke(
        command,
        ["--listen", "127.0.0.1:0"],
        env={"TRAFKA_CONSOLE_PASSWORD": "a", "TRAFKA_CONSOLE_PASSWORD_FILE": str(empty)},
    )
    assert both.exit_code == 2 and "not both" in both.output


def test_the_broker_console_takes_its_password_from_the_environment(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """brokerlite passes its console only addresses: the protection comes from
    the environment (here a password, on every interface)."""
    from pathlib import Path

    from trafka.brokerlite.server import broker_in_thread

    monkeypatch.setenv("TRAFKA_CONSOLE_PASSWORD", PASSWORD)
    with broker_in_thread(
        data_dir=Path(str(tmp_path)), port=0, console_listen="0.0.0.0:0"
    ) as running:
        assert running.console_address is not None
        there = Site(f"http://127.0.0.1:{running.console_address[1]}", running.bootstrap_servers)
        page = Client(follow=False).get(there, "/topics")
        assert page.status == 303 and page.headers["Location"] == "/login?next=%2Ftopics"
        client = Client()
        inside = login(client, there, PASSWORD, "/topics")
        assert inside.status == 200 and 'id="read-only"' not in inside.text


def test_sessions_and_the_login_brake_on_a_clock_the_test_moves() -> None:
    """The console's app alone (no cluster: the pages used here ask none), with
    a clock the test sets: a session ends when idle too long, and wrong
    passwords lock logins, the right one included, until the window passes."""
    from hypercorn.config import Config
    from hypercorn.trio import serve

    from trafka.console.access import LoginThrottle, Sessions, decide_access
    from trafka.console.app import make_app
    from trafka.console.cluster import Console

    now = [-1000.0]  # a monotonic clock may read below zero
    app = make_app(
        Console(None, {}, allowed_hosts=["127.0.0.1"]),  # type: ignore[arg-type]
        decide_access("127.0.0.1", password=PASSWORD),
        sessions=Sessions(idle_timeout=600, max_age=3600),
        throttle=LoginThrottle(max_failures=3, window=60),
        clock=lambda: now[0],
    )

    async def start(nursery: object) -> tuple[str, int]:
        config = Config()
        config.bind = ["127.0.0.1:0"]
        config.accesslog = None
        binds = await nursery.start(serve, app, config)  # type: ignore[attr-defined]
        host, _, port = binds[0].split("://")[1].rpartition(":")
        return host, int(port)

    with served_in_thread(start) as there:
        person = Client(follow=False)
        assert login(person, there, PASSWORD).status == 303
        assert person.get(there, "/topics/new").status == 200  # a form page: no cluster
        now[0] += 599
        assert person.get(there, "/topics/new").status == 200  # in use: kept
        now[0] += 601
        gone = person.get(there, "/topics/new")
        assert gone.status == 303 and gone.headers["Location"].startswith("/login")

        guesser = Client(follow=False)
        for _ in range(3):
            assert login(guesser, there, "guess").status == 401
        now[0] += 30
        locked = login(guesser, there, PASSWORD)
        assert locked.status == 429 and "try again in 30 s" in locked.text
        now[0] += 30  # the first wrong one is a minute old
        assert login(guesser, there, PASSWORD).status == 303
