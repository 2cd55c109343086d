"""A griffe extension for the API reference: the Sphinx roles of trafka's
docstrings (``:class:`~trafka.sdk.Producer```, ``:meth:`send```...) become
cross-references mkdocstrings renders as links.

trafka's docstrings are Google style (mkdocstrings' ``docstring_style: google``)
and name other objects with Sphinx's roles, which read well in the source and
in ``help()``; mkdocstrings does not know the roles and showed them as raw
text. Rules:

* ``:role:`target``` becomes an *optional* autoref to ``target`` resolved in
  the scope of the object whose docstring it is (``Producer`` inside
  ``trafka.sdk.producer`` resolves to what that module imports under that name;
  ``.send`` and ``send`` inside a class to its member): a link when the target
  is in the reference, plain code when it is not, never a broken link or a
  build warning.
* ``~`` shows the last component only (``~trafka.sdk.Producer`` shows
  ``Producer``), as in Sphinx; functions and methods get ``()`` after their
  name, as Sphinx's ``add_function_parentheses`` does.
* ``:role:`title <target>``` shows ``title``.
* Any other text is left alone.
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

__all__ = ["SphinxRoles", "rewrite_roles"]

_ROLE = re.compile(
    r":(?:py:)?(?P<role>class|meth|func|mod|attr|data|exc|obj|const|type):`(?P<body>[^`]+)`"
)
_CALLABLE_ROLES = frozenset({"meth", "func"})


def rewrite_roles(text: str, resolve: Any) -> str:
    """``text`` with every Sphinx role made an autoref; ``resolve(name)`` gives
    the full path of ``name`` or None when it cannot tell."""

    def one(match: re.Match[str]) -> str:
        role, body = match["role"], match["body"].strip()
        titled = re.fullmatch(r"(?P<title>.+?)\s*<(?P<target>[^>]+)>", body)
        if titled:
            title, target = titled["title"], titled["target"].strip()
        else:
            title, target = "", body
        short = target.startswith("~")
        target = target.lstrip("~").lstrip("!")
        bare = target.lstrip(".")
        if not title:
            title = bare.rsplit(".", 1)[-1] if short else bare
            if role in _CALLABLE_ROLES:
                title += "()"
        identifier = resolve(bare) or bare
        return (
            f'<autoref identifier="{html.escape(identifier, quote=True)}" optional>'
            f"<code>{html.escape(title)}</code></autoref>"
        )

    return _ROLE.sub(one, text)


def _resolver(obj: griffe.Object) -> Any:
    def resolve(name: str) -> str | None:
        head, _, rest = name.partition(".")
        for scope in (obj, obj.parent):
            if scope is None:
                continue
            try:
                found = scope.resolve(head)
            except (griffe.NameResolutionError, AttributeError, KeyError):
                continue
            return f"{found}.{rest}" if rest else found
        return name if "." in name else None

    return resolve


class SphinxRoles(griffe.Extension):
    """Rewrites the roles of every docstring griffe loads (see the module doc)."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        doc = obj.docstring
        if doc is not None and ":" in doc.value and "`" in doc.value:
            doc.value = rewrite_roles(doc.value, _resolver(obj))
