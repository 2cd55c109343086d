"""A TLS client's identity as a Kafka broker's SSL listener gives it: the
certificate's subject written as Java's ``X500Principal.getName()`` writes it,
and the principal's name mapped from it by ``ssl.principal.mapping.rules``
(KIP-371). The proxy's listeners (:mod:`trafka.proxy.mtls`) and brokerlite's
use the same.

Rules:

* The subject is RFC 2253's form: the last RDN first
  (``CN=app,OU=Services,O=Acme,C=DE``), the attributes of a multi-valued RDN
  joined by ``+``, the characters RFC 2253 names escaped with a backslash
  (and a leading ``#`` or space, a trailing space).
* Attribute types RFC 2253 names are written by name (CN, C, L, ST, O, OU,
  STREET, DC, UID); an e-mail address as Java writes it, its OID and the DER
  of its value in hex (``1.2.840.113549.1.9.1=#1610...``); another type by
  the name Python's ``ssl`` gives it.
* Mapping rules: a comma-separated list of ``RULE:pattern/replacement/[LU]``
  and ``DEFAULT``, tried in order; the first rule whose pattern matches the
  whole name gives the principal (``replacement`` with ``$1``... for the
  pattern's groups, then lower-cased with ``L``, upper-cased with ``U``);
  ``DEFAULT`` gives the name itself; no rule matching is
  :class:`NoMatchingRule`. Patterns are Python regular expressions (Kafka's
  are Java's: the usual syntax, ``(.*?)``, classes, anchors, is the same in
  both).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["NoMatchingRule", "PrincipalMapper", "distinguished_name"]

# Kafka's grammar (KIP-371): DEFAULT, or RULE:pattern/replacement/ and an
# optional L or U, where pattern and replacement escape / with a backslash.
_RULE = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLIT = re.compile(r"\s*(" + _RULE + r")\s*(?:,\s*|$)")
_PARSE = re.compile(_RULE)


class NoMatchingRule(ValueError):
    """No mapping rule applies to a certificate's name."""


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        if self.pattern.fullmatch(name) is None:
            return None
        out = self.pattern.sub(_java_replacement(self.replacement, self.pattern.groups), name)
        if self.case == "L":
            return out.lower()
        return out.upper() if self.case == "U" else out


def _java_replacement(text: str, groups: int) -> Callable[[re.Match[str]], str]:
    """A ``re.sub`` replacement doing what Java's ``replaceAll`` does with
    ``text``: ``$n`` a group (digits taken while the number stays a group; a
    number beyond the groups, literal, as Kafka escapes it), ``\\x`` the
    character x."""
    parts: list[str | int] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            parts.append(text[i + 1])
            i += 2
        elif c == "$" and i + 1 < len(text) and text[i + 1].isdigit():
            j = i + 1
            number = int(text[j])
            j += 1
            while j < len(text) and text[j].isdigit() and number * 10 + int(text[j]) <= groups:
                number = number * 10 + int(text[j])
                j += 1
            if number > groups:
                parts.append(text[i:j])
            else:
                parts.append(number)
            i = j
        else:
            parts.append(c)
            i += 1

    def replace(m: re.Match[str]) -> str:
        return "".join(p if isinstance(p, str) else (m.group(p) or "") for p in parts)

    return replace


class PrincipalMapper:
    """``ssl_principal_mapping_rules`` parsed (see the module's rules).

    Raises:
        ValueError: a rule that is not ``DEFAULT`` or ``RULE:pattern/replacement/[LU]``,
            or whose pattern is not a regular expression.
    """

    def __init__(self, rules: str = "DEFAULT") -> None:
        self.text = rules
        self.rules: list[_Rule] = []
        for m in _SPLIT.finditer(rules.strip()):
            rule = m.group(1)
            parsed = _PARSE.match(rule)
            if parsed is None or parsed.end() != len(rule):
                raise ValueError(f"invalid principal mapping rule {rule!r}")
            if parsed.group(1):
                self.rules.append(_Rule(None))
            elif parsed.group(2) is not None:
                try:
                    pattern = re.compile(parsed.group(2))
                except re.error as exc:
                    raise ValueError(f"principal mapping rule {rule!r}: {exc}") from None
                self.rules.append(_Rule(pattern, parsed.group(3), parsed.group(4)))
            elif parsed.group(5):
                raise ValueError(f"invalid principal mapping rule {rule!r}")

    def name(self, distinguished: str) -> str:
        """The principal's name for a certificate's subject.

        Raises:
            NoMatchingRule: no rule applies.
        """
        for rule in self.rules:
            got = rule.apply(distinguished)
            if got is not None:
                return got
        raise NoMatchingRule(f"no principal mapping rule applies to {distinguished!r}")


_SHORT = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
_EMAIL_OID = "1.2.840.113549.1.9.1"


def _escaped(value: str) -> str:
    out = re.sub(r'([,+"\\<>;])', r"\\\1", value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def _ava(kind: str, value: str) -> str:
    if kind == "emailAddress":
        raw = value.encode("ascii", "replace")
        return f"{_EMAIL_OID}=#16{len(raw):02x}{raw.hex()}" if len(raw) < 128 else ""
    return f"{_SHORT.get(kind, kind)}={_escaped(value)}"


def distinguished_name(cert: dict[str, Any]) -> str:
    """The subject of ``cert`` (``SSLSocket.getpeercert()``'s dictionary) as
    Java's ``X500Principal.getName()`` writes it (RFC 2253, last RDN first)."""
    rdns = cert.get("subject", ())
    return ",".join("+".join(_ava(k, v) for k, v in rdn) for rdn in reversed(rdns))
