"""Mutual TLS: client certificates checked on the proxy's listeners, the
client's principal taken from its certificate, as a Kafka broker's SSL
listener does.

Rules:

* ``ssl_client_auth`` has the values and meanings of Kafka's
  ``ssl.client.auth``: ``required`` (a client without a certificate signed by
  one of ``ssl_cafile``'s CAs fails its handshake), ``requested`` (a client may
  come without one; one it sends must verify) and ``none`` (none asked).
* The principal of a client with a certificate is ``User:`` and its subject's
  distinguished name mapped by ``ssl_principal_mapping_rules`` (KIP-371,
  Kafka's ``ssl.principal.mapping.rules``), both as :mod:`trafka.common.x500`
  writes them. A name no rule matches fails the client's connection, as it
  fails Kafka's authentication. A client without a certificate is
  ``User:ANONYMOUS``, as on Kafka's SSL listener.
* :class:`ClientTls` starts a client's TLS connection: the handshake, the
  identity, and the broker an SNI name picks (:mod:`.sni`), with the virtual
  host it names (``Session.virtual_host``).
* The principal reaches filters as ``FilterContext.principal`` (SASL, when
  the client then logs in, names the principal instead, as on Kafka's
  SASL_SSL listeners) and the subject as ``FilterContext.tls_subject``; both
  are logged at DEBUG with the connection.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Container
from typing import Any

import trio

from trafka.common.lograte import RateLimitedLog
from trafka.common.x500 import NoMatchingRule, PrincipalMapper, distinguished_name

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

    def renew(self, context: ssl.SSLContext, rules: str) -> None:
        """SIGHUP (:mod:`.reload`): new connections get ``context`` (its
        certificate, CAs and client-certificate demand) and their principals
        by ``rules``; connections already open keep what they started with.

        Raises:
            ValueError: ``rules`` do not parse (nothing is changed then).
        """
        mapper = PrincipalMapper(rules)
        if self.names is not None:
            note_names(context)
        self.context, self.mapper = context, mapper

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
        label = None
        try:
            with trio.fail_after(self.timeout):
                await tls.do_handshake()
            subject, principal = peer_identity(tls, self.mapper)
            if self.names is not None:
                node_id, label = self.names.pick(asked[0] if asked else None, known)
        except (trio.BrokenResourceError, trio.TooSlowError, ValueError) as exc:
            self.quiet.log(
                logging.INFO, "tls", "a client's TLS handshake failed: %s", exc.__cause__ or exc
            )
            await raw.aclose()
            return None
        log.debug("connection from %s: TLS principal %s (subject %r)", peer, principal, subject)
        if asked:
            log.debug("connection from %s asked for %s: broker %s", peer, asked[0], node_id)
        session = Session(principal=principal, tls_subject=subject, virtual_host=label)
        return tls, session, node_id
