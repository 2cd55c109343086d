"""Java's JAAS login lines, as Kafka's clients (``sasl.jaas.config``) and brokers
(``listener.name.<listener>.<mechanism>.sasl.jaas.config``) take them.

A line is ``<LoginModule class> <flag> name="value" name="value" ...;``. This module
reads the options; what a line must hold besides (its module, its flag) is the
reader's to decide.

Rules:

* An option's value is double-quoted; a backslash escapes the next character
  (``\\"`` is a quote). Names are word characters, ``.`` and ``-``.
* Stateless; never puts a value (a password) in an error or a log.
"""

from __future__ import annotations

import re

__all__ = ["jaas_options", "jaas_rest"]

_OPTION = re.compile(r'([\w.-]+)\s*=\s*"((?:[^"\\]|\\.)*)"')
_ESCAPE = re.compile(r"\\(.)")


def jaas_options(text: str) -> dict[str, str]:
    """The ``name="value"`` options of a JAAS line, unescaped (a repeated name: the last)."""
    return {name: _ESCAPE.sub(r"\1", value) for name, value in _OPTION.findall(text)}


def jaas_rest(text: str) -> str:
    """``text`` without its options: what a strict reader checks is only the module,
    the flag and the closing ``;``."""
    return _OPTION.sub(" ", text)
