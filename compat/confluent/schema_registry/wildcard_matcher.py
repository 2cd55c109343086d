"""confluent-kafka's ``confluent_kafka.schema_registry.wildcard_matcher``: the
wildcards rules use to name fields and subjects.

Rules: ``?`` is one character other than ``.``; ``*`` is any run of
characters without a ``.``; ``**`` is any run at all (dots too), and so is
``**.*`` (confluent-kafka reads it as ``**``: ``**.*`` matches the empty text);
every other character is itself; the whole text must match, case-sensitively.
"""

from __future__ import annotations

import functools
import re

__all__ = ["wildcard_match"]


@functools.lru_cache(maxsize=256)
def _compiled(wildcard: str) -> re.Pattern[str]:
    wildcard = wildcard.replace("**.*", "**")
    out = []
    i = 0
    while i < len(wildcard):
        c = wildcard[i]
        if wildcard.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        out.append("[^.]*" if c == "*" else "[^.]" if c == "?" else re.escape(c))
        i += 1
    return re.compile("".join(out), re.S)


def wildcard_match(text: str, wildcard: str) -> bool:
    """Whether all of ``text`` matches ``wildcard`` (see the module doc)."""
    return _compiled(wildcard).fullmatch(text) is not None
