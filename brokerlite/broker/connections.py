"""The broker's connections: their sessions, and SASL authentication as the core sees it.

Rules: whatever the broker knows of a connection is its
:class:`~trafka.brokerlite.session.ConnectionSession`, opened when the driver
accepts it (or by its first request, when it was not seen opened) and dropped
whole when it closes (the broker then drops its parked request too: a member
whose JoinGroup was parked on it leaves its group at the next poll). The SASL
rules are the session's (``session.py``); here, the frame size allowed before
authentication.
"""

from __future__ import annotations

from ..config import BrokerConfig
from ..intake import early_refusal
from ..outcomes import Close
from ..security.authorizer import ANONYMOUS
from ..security.sasl import UserStore
from ..session import ConnectionSession, SaslPolicy

__all__ = ["Sessions"]


class Sessions:
    """The open connections' sessions, by connection id (``Broker.connections``).

    Args:
        config: the broker settings (the frame size limits, the SASL mechanisms
            and ``connections_max_reauth_ms``).
        sasl_users: the SASL users, None when no listener authenticates with SASL.
    """

    def __init__(self, config: BrokerConfig, sasl_users: UserStore | None) -> None:
        self._config = config
        self._policy = (
            None
            if sasl_users is None
            else SaslPolicy(
                sasl_users, config.sasl_enabled_mechanisms, config.connections_max_reauth_ms
            )
        )
        self._sessions: dict[int, ConnectionSession] = {}

    @property
    def sasl_reauthentications(self) -> int:
        """Re-authentications completed since the broker started (KIP-368)."""
        return 0 if self._policy is None else self._policy.reauthentications

    @property
    def sasl_sessions_expired(self) -> int:
        """Connections closed because their SASL session expired, since the broker started."""
        return 0 if self._policy is None else self._policy.sessions_expired

    @property
    def open_sessions(self) -> int:
        """How many connections the broker holds a session for."""
        return len(self._sessions)

    def opened(
        self, conn_id: int, peer: str, *, tls_subject: str | None = None
    ) -> ConnectionSession:
        """Open the session of a new connection: its peer address (for logs,
        DescribeGroups and ACLs) and the subject of its TLS client certificate, if
        it showed one."""
        session = self._sessions[conn_id] = ConnectionSession(
            conn_id, peer, tls_subject=tls_subject, sasl_policy=self._policy
        )
        return session

    def session(self, conn_id: int) -> ConnectionSession:
        """The session of a connection; a connection not seen opened gets a new one."""
        session = self._sessions.get(conn_id)
        if session is None:
            session = self._sessions[conn_id] = ConnectionSession(conn_id, sasl_policy=self._policy)
        return session

    def closed(self, conn_id: int) -> ConnectionSession | None:
        """Drop a connection's session; the session, or None when it had none."""
        return self._sessions.pop(conn_id, None)

    def principal_of(self, conn_id: int) -> str:
        """The connection's principal for ACLs (``User:alice``, ``User:ANONYMOUS``)."""
        session = self._sessions.get(conn_id)
        return ANONYMOUS if session is None else session.principal

    def peer(self, conn_id: int) -> str:
        """The peer address of a connection, ``"?"`` when unknown."""
        session = self._sessions.get(conn_id)
        return "?" if session is None else session.peer

    def client_id(self, conn_id: int) -> str | None:
        """The client id of the connection's latest request header, if any."""
        session = self._sessions.get(conn_id)
        return None if session is None else session.client_id

    def client_software(self, conn_id: int) -> tuple[str, str] | None:
        """The client software (name, version) the connection's ApiVersions v3+ named."""
        session = self._sessions.get(conn_id)
        return None if session is None else session.client_software

    # -- SASL authentication ----------------------------------------------------

    def authenticating(self, conn_id: int) -> bool:
        """True while a connection of a SASL listener has not authenticated."""
        session = self._sessions.get(conn_id)
        return self._policy is not None if session is None else session.authenticating

    def principal(self, conn_id: int) -> str | None:
        """The SASL user a connection authenticated as; None without SASL (or yet)."""
        session = self._sessions.get(conn_id)
        return None if session is None else session.sasl_user

    def max_frame_size(self, conn_id: int) -> int:
        """The largest request frame the connection may send now.

        Before SASL authentication this is ``sasl_server_max_receive_size``
        (Kafka's 512 KiB), so that an unauthenticated peer cannot make the broker
        buffer a large frame.
        """
        limit = self._config.socket_request_max_bytes
        if self.authenticating(conn_id):
            return min(limit, self._config.sasl_server_max_receive_size)
        return limit

    def early_refusal(self, conn_id: int, api_key: int) -> Close | None:
        """The :class:`Close` ``Broker.handle_frame`` will answer a request of
        ``api_key`` with by its key alone, before SASL authentication
        (:func:`.intake.early_refusal`)."""
        return early_refusal(self.session(conn_id), api_key)
