"""The overview and the topics' pages: the list, one topic, and its changes
(create, delete, configs, partitions, purge).

Rules:

* A deletion (a topic, or its records) needs the topic's name typed again in
  the form's ``confirm``: one wrong click deletes nothing.
* The overview and a topic's page show the throughput sampled by
  :meth:`~..cluster.Console.sample_throughput`, and how often it is sampled.
"""

from __future__ import annotations

import time
import urllib.parse
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from trafka.sdk import NewTopic

from .. import model, throughput
from ..cluster import Console
from ..model import InputError
from . import PageGroup

__all__ = ["TopicPages", "rates_context"]


def rates_context(console: Console, topic: str | None) -> dict[str, Any]:
    """The throughput charts and rates of the brokers (``topic`` None) or of a topic."""
    history = console.rates
    owners: list[tuple[str, throughput.SeriesKey]]
    if topic is None:
        charts = throughput.broker_charts(history)
        owners = [(f"broker {b}", ("broker", b, "messages_in")) for b in history.brokers()]
    else:
        charts = throughput.topic_charts(history, topic)
        owners = [(topic, ("topic", topic, "messages_in"))] if history.samples > 1 else []
    return {
        "charts": charts,
        "rates": throughput.rate_rows(history, owners),
        "interval": console.sample_interval,
        "samples": history.samples,
    }


class TopicPages(PageGroup):
    """``/`` (the overview) and ``/topics...`` of a cluster."""

    def routes(self) -> list[Route]:
        guarded = self.site.guarded
        both = ["GET", "POST"]
        return [
            Route("/", guarded(self.overview)),
            Route("/topics", guarded(self.topics)),
            Route("/topics/new", guarded(self.new_topic, form_page=True), methods=both),
            Route("/topics/{name}", guarded(self.topic)),
            Route("/topics/{name}/delete", guarded(self.delete_topic), methods=["POST"]),
            Route("/topics/{name}/configs", guarded(self.configs), methods=["POST"]),
            Route("/topics/{name}/partitions", guarded(self.partitions), methods=["POST"]),
            Route("/topics/{name}/purge", guarded(self.purge), methods=["POST"]),
        ]

    def to_topic(self, request: Request, name: str) -> Response:
        return self.site.redirect(request, f"/topics/{urllib.parse.quote(name)}")

    async def overview(self, request: Request) -> Response:
        console = self.site.console(request)
        view = await console.overview()
        return self.site.page(request, "overview.html", view=view, **rates_context(console, None))

    async def topics(self, request: Request) -> Response:
        started = time.perf_counter()
        rows = await self.site.console(request).topics()
        show_internal = request.query_params.get("internal") == "1"
        shown = [r for r in rows if show_internal or not r.internal]
        return self.site.page(
            request,
            "topics.html",
            rows=shown,
            hidden=len(rows) - len(shown),
            show_internal=show_internal,
            took=time.perf_counter() - started,
        )

    async def new_topic(self, request: Request) -> Response:
        if request.method == "GET":
            return self.site.page(request, "topic_new.html")
        t = model.parse_new_topic_form(self.site.form_of(request))
        await self.site.console(request).admin.create_topics(
            [NewTopic(t.name, t.partitions, t.replication_factor, t.configs)]
        )
        return self.to_topic(request, t.name)

    async def topic(self, request: Request) -> Response:
        started = time.perf_counter()
        console = self.site.console(request)
        view = await console.topic(request.path_params["name"])
        return self.site.page(
            request,
            "topic.html",
            view=view,
            took=time.perf_counter() - started,
            **rates_context(console, view.name),
        )

    async def delete_topic(self, request: Request) -> Response:
        name = request.path_params["name"]
        form = self.site.form_of(request)
        if form.get("confirm", "").strip() != name:
            raise InputError(f"confirm: type the topic's name ({name}) to delete it")
        await self.site.console(request).admin.delete_topics([name])
        return self.site.redirect(request, "/topics")

    async def configs(self, request: Request) -> Response:
        name = request.path_params["name"]
        form = self.site.form_of(request)
        resets = self.site.form_values(request, "reset")
        await self.site.console(request).alter_configs(model.parse_config_form(name, form, resets))
        return self.to_topic(request, name)

    async def partitions(self, request: Request) -> Response:
        name = request.path_params["name"]
        await self.site.console(request).add_partitions(name, self.site.form_of(request))
        return self.to_topic(request, name)

    async def purge(self, request: Request) -> Response:
        name = request.path_params["name"]
        form = model.parse_purge_form(name, self.site.form_of(request))
        await self.site.console(request).purge(form)
        return self.to_topic(request, name)
