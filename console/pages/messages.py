"""A topic's messages: the browser, the search and the produce form.

Rules:

* Browsing and searching are GETs whose query string is the whole query, so
  a page of messages can be bookmarked, reloaded and shared; the next page of
  a search carries where the last one stopped (``before``).
* Reading never changes the cluster (no group joined, nothing committed);
  producing is a change, behind the form's checks, and needs the topic to
  exist.
"""

from __future__ import annotations

import urllib.parse

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import model, search
from ..cluster import SEARCH_SECONDS
from . import PageGroup

__all__ = ["MessagePages"]


class MessagePages(PageGroup):
    """``/topics/NAME/messages``, ``/search`` and ``/produce`` of a cluster."""

    def routes(self) -> list[Route]:
        guarded = self.site.guarded
        return [
            Route("/topics/{name}/messages", guarded(self.messages)),
            Route("/topics/{name}/search", guarded(self.search)),
            Route(
                "/topics/{name}/produce",
                guarded(self.produce, form_page=True),
                methods=["GET", "POST"],
            ),
        ]

    async def messages(self, request: Request) -> Response:
        name = request.path_params["name"]
        q = model.parse_browse_query(name, dict(request.query_params))
        found = await self.site.console(request).browse(q)
        found["rows"] = model.sort_rows(found["rows"], q.sort, q.descending)
        # Each sortable column's link: by it, ascending, or the other way when
        # the page is sorted by it ascending already.
        asked = dict(request.query_params)
        flip = "desc" if not q.descending else "asc"
        sorts = {
            s: "?"
            + urllib.parse.urlencode({**asked, "sort": s, "order": flip if q.sort == s else "asc"})
            for s in model.SORTS
        }
        return self.site.page(
            request, "messages.html", topic=name, modes=model.DECODE_MODES, sorts=sorts, **found
        )

    async def search(self, request: Request) -> Response:
        name = request.path_params["name"]
        console = self.site.console(request)
        form = dict(request.query_params)
        found = None
        go_on = ""
        if form.get("q"):
            found = await console.search(search.parse_search_query(name, form))
            go_on = urllib.parse.urlencode({**form, "before": found["before"]})
        else:
            await console.partition_count(name)
        return self.site.page(
            request,
            "search.html",
            topic=name,
            form=form,
            found=found,
            go_on=go_on,
            targets=search.TARGETS,
            modes=search.MODES,
            seconds=SEARCH_SECONDS,
        )

    async def produce(self, request: Request) -> Response:
        name = request.path_params["name"]
        console = self.site.console(request)
        if request.method == "GET":
            await console.partition_count(name)
            return self.site.page(request, "produce.html", topic=name, sent=None)
        message = model.parse_produce_form(name, self.site.form_of(request))
        sent = await console.produce(message)
        return self.site.page(request, "produce.html", topic=name, sent=sent)
