"""The small HTTP and cluster helpers the console's tests share (a module of
its own: ``from conftest import`` finds another directory's conftest when
pytest is given several test directories): plain blocking HTTP to the
console, as a browser speaks (keeping cookies, as a browser does: a
:class:`Client` is one browser), a console of its own on a thread
(:func:`console_in_thread`), and the SDK seeding the data under a deadline.
"""

from __future__ import annotations

import html
import http.cookiejar
import queue
import re
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import trio

from trafka.sdk import NewTopic, open_admin, open_consumer, open_producer

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "console"


class Site(NamedTuple):
    """The console of a running broker."""

    base: str  # http://127.0.0.1:PORT
    bootstrap: str


class Page(NamedTuple):
    status: int
    url: str
    text: str
    headers: Any = None


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class Client:
    """One browser: its own cookies. ``follow=False``: redirects are answers."""

    def __init__(self, *, follow: bool = True) -> None:
        self.jar = http.cookiejar.CookieJar()
        handlers: list[Any] = [urllib.request.HTTPCookieProcessor(self.jar)]
        if not follow:
            handlers.append(_NoRedirect())
        self.opener = urllib.request.build_opener(*handlers)

    def open(self, request: urllib.request.Request) -> Page:
        """The answer to ``request``, an HTTP error status included."""
        try:
            with self.opener.open(request, timeout=20) as response:
                return Page(
                    response.status, response.url, response.read().decode(), response.headers
                )
        except urllib.error.HTTPError as exc:
            return Page(exc.code, exc.url, exc.read().decode(), exc.headers)

    def get(self, site: Site, path: str, headers: dict[str, str] | None = None) -> Page:
        return self.open(urllib.request.Request(site.base + path, headers=headers or {}))

    def post(
        self,
        site: Site,
        path: str,
        fields: dict[str, str],
        *,
        origin: str | None = "",
        content_type: str = "application/x-www-form-urlencoded",
        headers: dict[str, str] | None = None,
    ) -> Page:
        """POST a form as the console's own page would (``origin=""``: the
        console's origin; None: no Origin header)."""
        sent = {"Content-Type": content_type, **(headers or {})}
        if origin is not None:
            sent["Origin"] = origin or site.base
        data = urllib.parse.urlencode(fields).encode()
        return self.open(
            urllib.request.Request(site.base + path, data=data, headers=sent, method="POST")
        )


#: The browser of the tests that do not care whose they are.
_BROWSER = Client()


@contextmanager
def served_in_thread(
    start: Callable[[trio.Nursery], Awaitable[tuple[str, int]]], bootstrap: str = ""
) -> Iterator[Site]:
    """What ``start`` serves in a nursery (returning the bound address), on a
    trio loop in a thread until the block ends; the Site's base is its address
    (127.0.0.1 when it listens on all interfaces)."""
    started: queue.Queue[Any] = queue.Queue()

    async def serve() -> None:
        async with trio.open_nursery() as nursery:
            host, port = await start(nursery)
            started.put((host, port, nursery.cancel_scope, trio.lowlevel.current_trio_token()))

    def main() -> None:
        try:
            trio.run(serve)
        except BaseException as exc:  # the test's thread raises it
            started.put(exc)

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    got = started.get(timeout=30)
    if isinstance(got, BaseException):
        raise got
    host, port, scope, token = got
    host = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    try:
        yield Site(f"http://{host}:{port}", bootstrap)
    finally:
        token.run_sync_soon(scope.cancel)
        thread.join(30)


def console_in_thread(settings: Any) -> Any:
    """A console of its own (``settings``: a ConsoleSettings), served in a thread."""
    from trafka.console import serve_console

    async def start(nursery: trio.Nursery) -> tuple[str, int]:
        bound: tuple[str, int] = await nursery.start(serve_console, settings)
        return bound

    return served_in_thread(start, settings.client_config.get("bootstrap.servers", ""))


def run(fn: Callable[[], Awaitable[Any]], deadline: float = 30.0) -> Any:
    """``fn()`` on a trio loop of its own, failing after ``deadline`` seconds."""

    async def main() -> Any:
        with trio.fail_after(deadline):
            return await fn()

    return trio.run(main)


def get(site: Site, path: str, headers: dict[str, str] | None = None) -> Page:
    return _BROWSER.get(site, path, headers)


def cells(page_text: str, table_id: str) -> list[list[str]]:
    """The text of each body row's cells of a table."""
    table = re.split(f'<table id="{table_id}"[^>]*>', page_text, maxsplit=1)[1]
    table = table.split("</table>", 1)[0]
    body = table.split("<tbody>", 1)[1]
    rows = []
    for row in re.findall(r"<tr>(.*?)</tr>", body, re.DOTALL):
        rows.append(
            [
                html.unescape(re.sub(r"<[^>]+>", "", c)).strip()
                for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.DOTALL)
            ]
        )
    return rows


def token_of(page: Page) -> str:
    found = re.search(r'name="token" (?:value|content)="([^"]+)"', page.text)
    assert found, "no form token on the page"
    return found.group(1)


def post(
    site: Site,
    path: str,
    fields: dict[str, str],
    *,
    origin: str | None = "",
    content_type: str = "application/x-www-form-urlencoded",
) -> Page:
    """POST a form as the console's own page would (``origin=""``: the console's
    origin; None: no Origin header)."""
    return _BROWSER.post(site, path, fields, origin=origin, content_type=content_type)


def create_topics(site: Site, *topics: NewTopic) -> None:
    async def go() -> None:
        async with open_admin(bootstrap_servers=site.bootstrap) as admin:
            await admin.create_topics(list(topics))

    run(go)


def produce(site: Site, topic: str, records: list[tuple[bytes | None, bytes, int]]) -> None:
    """``(key, value, partition)`` records, waited for."""

    async def go() -> None:
        async with open_producer(bootstrap_servers=site.bootstrap) as producer:
            for key, value, partition in records:
                await producer.send(topic, value, key=key, partition=partition)

    run(go)


def consume_and_commit(site: Site, group: str, topic: str, count: int) -> None:
    """Join ``group``, read ``count`` records of ``topic`` from the start, commit, leave."""

    async def go() -> None:
        async with open_consumer(
            topic,
            bootstrap_servers=site.bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            max_poll_records=count,
        ) as consumer:
            got = 0
            while got < count:
                batch = await consumer.getmany(timeout_ms=500, max_records=count - got)
                got += sum(len(v) for v in batch.values())
            await consumer.commit()

    run(go)


class FakeClock:
    """Seconds the test sets: the samples' times, so rates do not depend on time."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Consoles(NamedTuple):
    """Consoles of several clusters served by one app (:func:`consoles_in_thread`)."""

    site: Site
    consoles: dict[str, Any]
    token: Any  # the serving loop's TrioToken

    def sample(self, name: str) -> Any:
        """One throughput sample of cluster ``name``, taken on the console's loop."""
        console = self.consoles[name]

        async def go() -> Any:
            with trio.fail_after(30):
                return await console.sample_throughput()

        return trio.from_thread.run(go, trio_token=self.token)


@contextmanager
def consoles_in_thread(
    bootstraps: dict[str, str], clock: FakeClock, access: Any = None
) -> Iterator[Consoles]:
    """The console app over ``bootstraps`` (name: bootstrap servers, the first
    the default), each cluster's samples timed by ``clock`` and taken only when
    the test asks (:meth:`Consoles.sample`), with the cluster checks running."""
    from contextlib import AsyncExitStack

    from hypercorn.config import Config
    from hypercorn.trio import serve

    from trafka.console.access import decide_access
    from trafka.console.app import make_app
    from trafka.console.cluster import Console

    made: dict[str, Any] = {}

    async def run_all(*, task_status: Any) -> None:
        # The admin clients are opened and closed by this one task: each owns
        # a task group, which must be left by the task that entered it.
        async with AsyncExitStack() as stack:
            for name, servers in bootstraps.items():
                admin = await stack.enter_async_context(
                    open_admin(bootstrap_servers=servers, default_api_timeout_ms=5000)
                )
                made[name] = Console(
                    admin, {"bootstrap.servers": servers}, allowed_hosts=["127.0.0.1"], clock=clock
                )
            async with trio.open_nursery() as nursery:
                for console in made.values():
                    nursery.start_soon(console.watch_cluster)
                config = Config()
                config.bind = ["127.0.0.1:0"]
                config.accesslog = None
                app = make_app(dict(made), access or decide_access("127.0.0.1"))
                binds = await nursery.start(serve, app, config)
                made["@token"] = trio.lowlevel.current_trio_token()
                netloc = binds[0].split("://", 1)[1]
                host, _, port = netloc.rpartition(":")
                task_status.started((host, int(port)))

    async def start(nursery: trio.Nursery) -> tuple[str, int]:
        bound: tuple[str, int] = await nursery.start(run_all)
        return bound

    first = next(iter(bootstraps.values()))
    with served_in_thread(start, first) as site:
        token = made.pop("@token")
        yield Consoles(site, made, token)


def record_parts(page_text: str) -> list[tuple[str, str]]:
    """The messages table's records: each row's one line (the value's
    ``<summary>``) and what it expands to (key, value and headers), as text."""
    table = page_text.split('<table id="messages"', 1)[1].split("</table>", 1)[0]

    def text(fragment: str) -> str:
        return html.unescape(re.sub(r"<[^>]+>", "", fragment)).strip()

    return [
        (text(line), text(full))
        for line, full in re.findall(
            r'<summary class="line">(.*?)</summary><div class="full">(.*?)</div></details>',
            table,
            re.DOTALL,
        )
    ]
