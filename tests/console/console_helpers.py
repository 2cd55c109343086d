"""The small HTTP and cluster helpers the console's tests share (a module of
its own: ``from conftest import`` finds another directory's conftest when
pytest is given several test directories): plain blocking HTTP to the
console, as a browser speaks, and the SDK seeding the data under a deadline.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable
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


def run(fn: Callable[[], Awaitable[Any]], deadline: float = 30.0) -> Any:
    """``fn()`` on a trio loop of its own, failing after ``deadline`` seconds."""

    async def main() -> Any:
        with trio.fail_after(deadline):
            return await fn()

    return trio.run(main)


def _page(request: urllib.request.Request) -> Page:
    """The answer to ``request``, an HTTP error status included."""
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return Page(response.status, response.url, response.read().decode())
    except urllib.error.HTTPError as exc:
        return Page(exc.code, exc.url, exc.read().decode())


def get(site: Site, path: str, headers: dict[str, str] | None = None) -> Page:
    return _page(urllib.request.Request(site.base + path, headers=headers or {}))


def token_of(page: Page) -> str:
    found = re.search(r'name="token" value="([^"]+)"', page.text)
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
    headers = {"Content-Type": content_type}
    if origin is not None:
        headers["Origin"] = origin or site.base
    data = urllib.parse.urlencode(fields).encode()
    return _page(
        urllib.request.Request(site.base + path, data=data, headers=headers, method="POST")
    )


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
