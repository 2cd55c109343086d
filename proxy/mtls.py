"""Mutual TLS: client certificates checked on the proxy's listeners, the
client's principal taken from its certificate, as a Kafka broker's SSL
listener does.

Rules:

* ``ssl_client_auth`` has the values and meanings of Kafka's
  ``ssl.client.auth``: ``required`` (a client without a certificate signed by
  one of ``ssl_cafile``'s CAs fails its handshake), ``requested`` (a client may
  come without one; one it sends must verify) and ``none`` (none asked).
* The principal of a client with a certificate is ``User:`` and its subject's
  distinguished name, written as Java's ``X500Principal.getName()`` writes it
  (RFC 2253: the last RDN first, ``CN=app,OU=Services,O=Acme,C=DE``), mapped by
  ``ssl_principal_mapping_rules`` (KIP-371, Kafka's
  ``ssl.principal.mapping.rules``): a comma-separated list of
  ``RULE:pattern/replacement/[LU]`` and ``DEFAULT``, tried in order; the
  first rule whose pattern matches the whole name gives the principal
  (``replacement`` with ``$1``... for the pattern's groups, then lower-cased
  with ``L``, upper-cased with ``U``); ``DEFAULT`` gives the name itself. A
  name no rule matches fails the client's connection, as it fails Kafka's
  authentication. A client without a certificate is ``User:ANONYMOUS``, as on
  Kafka's SSL listener.
* Patterns are Python regular expressions (Kafka's are Java's: the usual
  syntax, ``(.*?)``, classes, anchors, is the same in both).
* Attribute types RFC 2253 names are written by name (CN, C, L, ST, O, OU,
  STREET, DC, UID); an e-mail address as Java writes it, its OID and the DER
  of its value in hex (``1.2.840.113549.1.9.1=#1610...``).
* :class:`ClientTls` starts a client's TLS connection: the handshake, the
  identity, and the broker an SNI name picks (:mod:`.sni`).
* The principal reaches filters as ``FilterContext.principal`` (SASL, when
  the client then logs in, names the principal instead, as on Kafka's
  SASL_SSL listeners) and the subject as ``FilterContext.tls_subject``; both
  are logged at DEBUG with the connection.
"""

from __future__ import annotations

import logging
import re
import ssl
from collections.abc import Callable, Container
from dataclasses import dataclass
from typing import Any

import trio

from trafka.common.lograte import RateLimitedLog

from .filters import Session
from .sni import SniNames, asked_name, note_names

__all__ = [
    "ANONYMOUS",
    "CLIENT_AUTH",
    "NoMatchingRule",
    "PrincipalMapper",
    "distinguished_name",
    "peer_identity",
    "ClientTls",
]

log = logging.getLogger("trafka.proxy")

ANONYMOUS = "User:ANONYMOUS"
CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}

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


def peer_identity(stream: Any, mapper: PrincipalMapper) -> tuple[str | None, str]:
    """(The subject's name, the principal) of a TLS stream's client after its
    handshake: (None, ``User:ANONYMOUS``) without a certificate.

    Raises:
        NoMatchingRule: no mapping rule applies to the subject.
    """
    cert = stream.getpeercert()
    if not cert:
        return None, ANONYMOUS
    subject = distinguished_name(cert)
    return subject, "User:" + mapper.name(subject)


class ClientTls:
    """The TLS side of a client connection's start: the handshake within
    ``timeout``, the client's identity (:func:`peer_identity`) and, with
    :mod:`.sni`, the broker the name it asked for picks.

    A failure (handshake, no mapping rule, an unknown name) is logged through
    ``quiet`` (a line a minute) and the connection closed.
    """

    def __init__(
        self,
        context: ssl.SSLContext,
        timeout: float,
        mapper: PrincipalMapper,
        quiet: RateLimitedLog,
        names: SniNames | None,
    ) -> None:
        self.context, self.timeout, self.mapper = context, timeout, mapper
        self.quiet, self.names = quiet, names
        if names is not None:
            note_names(context)

    @classmethod
    def of(
        cls,
        context: ssl.SSLContext | None,
        settings: tuple[float, Any],
        quiet: RateLimitedLog,
        names: SniNames | None,
    ) -> ClientTls | None:
        """The client side of a proxy's settings, ``(connect_timeout,
        ssl_principal_mapping_rules)`` (None without TLS towards clients)."""
        if context is None:
            return None
        timeout, rules = settings
        return cls(context, timeout, PrincipalMapper(rules), quiet, names)

    async def accept(
        self, raw: trio.SocketStream, peer: str, node_id: int | None, known: Container[int]
    ) -> tuple[trio.SSLStream[trio.SocketStream], Session, int | None] | None:
        """(The TLS stream, the connection's session, the broker it stands for),
        or None once the connection is closed."""
        tls = trio.SSLStream(raw, self.context, server_side=True)
        asked = asked_name()
        try:
            with trio.fail_after(self.timeout):
                await tls.do_handshake()
            subject, principal = peer_identity(tls, self.mapper)
            if self.names is not None:
                node_id = self.names.node_of(asked[0] if asked else None, known)
        except (trio.BrokenResourceError, trio.TooSlowError, ValueError) as exc:
            self.quiet.log(
                logging.INFO, "tls", "a client's TLS handshake failed: %s", exc.__cause__ or exc
            )
            await raw.aclose()
            return None
        log.debug("connection from %s: TLS principal %s (subject %r)", peer, principal, subject)
        if asked:
            log.debug("connection from %s asked for %s: broker %s", peer, asked[0], node_id)
        return tls, Session(principal=principal, tls_subject=subject), node_id
