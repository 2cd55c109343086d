"""A TCP relay in front of a registry, for the schema tests (what goes on the wire)."""

from __future__ import annotations

import socket
import ssl
import threading


class Relay:
    """A TCP relay in front of the registry: TLS on its side when given a
    context, the first ``drop`` connections closed at once, and the bytes
    clients sent kept (to read what went on the wire). With a ``gate``, what a
    client sends waits until the gate is set (``arrived`` is set once something did)."""

    def __init__(
        self,
        target: tuple[str, int],
        tls: ssl.SSLContext | None = None,
        drop: int = 0,
        gate: threading.Event | None = None,
    ):
        self.target, self.tls, self.drop, self.gate = target, tls, drop, gate
        self.arrived = threading.Event()
        self.sent = bytearray()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            if self.drop:
                self.drop -= 1
                conn.close()
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            upstream = socket.create_connection(self.target)
        except (OSError, ssl.SSLError):
            conn.close()
            return
        threading.Thread(target=self._pipe, args=(upstream, conn, False), daemon=True).start()
        self._pipe(conn, upstream, True)

    def _pipe(self, src: socket.socket, dst: socket.socket, record: bool) -> None:
        try:
            while data := src.recv(65536):
                if record:
                    self.arrived.set()
                    if self.gate is not None:
                        self.gate.wait()
                    self.sent.extend(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.listener.close()

    def request_count(self) -> int:
        """HTTP requests the clients sent through the relay (their request lines)."""
        sent = bytes(self.sent)
        return sum(sent.count(f"{m} /".encode()) for m in ("GET", "POST", "PUT", "DELETE"))
