"""The console's pages, a module per group of them: :mod:`.session` (logging
in and out), :mod:`.topics` (the overview, topics and their changes),
:mod:`.messages` (browsing, searching and producing), :mod:`.groups` and
:mod:`.acls`.

Rules:

* A group of pages is a :class:`PageGroup` over the :class:`~..site.Site`
  whose ``routes()`` lists its paths, each handler behind
  :meth:`~..site.Site.guarded`; :func:`~..app.make_app` mounts them. A
  handler only reads the request, asks :class:`~..cluster.Console` and
  renders a template: the checks, the errors' pages and the cluster's health
  are the site's.
* A change is a POST answered with a redirect (303) to the page that shows
  its outcome, so that reloading that page does not repeat it.
"""

from __future__ import annotations

from starlette.routing import Route

from ..site import Site

__all__ = ["PageGroup"]


class PageGroup:
    """A group of pages over ``site``: its handlers are its methods, and
    :meth:`routes` lists their paths."""

    def __init__(self, site: Site) -> None:
        self.site = site

    def routes(self) -> list[Route]:
        raise NotImplementedError
