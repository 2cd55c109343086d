"""The trio driver: sockets and tasks around the sans-IO :class:`~.broker.Broker`.

Rules and invariants:

* One reader task per connection feeds a :class:`~trafka.codec.framing.FrameReader`
  and hands each frame to ``Broker.handle_frame``. It does not take the next
  frame before the current request is answered or known to need no answer
  (Kafka mutes a connection the same way), so responses leave in request
  order and a parked Fetch or JoinGroup delays later requests of its own
  connection only.
* Fast path: when the connection's writer is idle (everything handed to it
  is written) and a reply is made of bytes only, the reader writes it at
  once, without a checkpoint, with one non-blocking write on the socket's
  file descriptor, and hands only what the kernel did not take to the
  writer. Everything else goes to the writer: replies with file ranges
  (Fetch), and every reply while the writer holds anything, so a direct
  write never overtakes an earlier reply.
* One writer task per connection sends what it is handed, serialised, from a
  bounded memory channel (backpressure: a client that does not read its
  responses fills the socket, then the channel, and then stops being read).
  Byte parts go out with non-blocking writes, waiting for the socket to be
  writable when it is full; file ranges with ``os.sendfile`` (pread and write
  where sendfile is unavailable).
* Direct writes rely on trio's sockets being non-blocking (trio sets
  O_NONBLOCK on every socket it wraps; the driver checks it per connection)
  and, like any Python socket send, on Python ignoring SIGPIPE. A write that
  fails (reset, broken pipe) closes that connection only.
* The reader checkpoints once per chunk it receives (``receive_some``) and
  every ``_FRAMES_PER_YIELD`` frames within one chunk, so a busy connection
  cannot starve the others and cancellation reaches it.
* A malformed frame, an unknown API key, a version nobody can answer or an
  oversized frame closes only that connection, with a log line naming the
  peer address and client id (strings from the client are written escaped,
  ``%r``, so that none can forge a line). Errors of one connection never reach
  another or the listener; the broker never crashes because of input.
* What clients can repeat at will (malformed frames, refused requests, failed
  handshakes, timeouts) and failing accepts (out of file descriptors) are
  logged through a :class:`~trafka.common.lograte.RateLimitedLog`: one line a minute per
  kind and client host, with the count of the others.
* Memory of requests still arriving (:mod:`trafka.common.request_budget`,
  ``queued_max_request_bytes``): a frame that did not arrive whole reserves its
  size once its size prefix is in, and the connection is not read again until
  the budget grants it (backpressure); then no more than the rest of that frame
  is read. Besides the budget, a connection holds at most one read
  (``_RECV_SIZE``) of a frame not yet reserved. Before SASL authentication, a
  frame whose header names a request that would be refused anyway closes the
  connection before its body is read.
* Timeouts: between requests a connection may stay silent
  ``connections_max_idle_ms`` (not counting while its request is parked or its
  reply still being written); a request must arrive whole within
  ``request_receive_timeout_ms`` of its first bytes (waiting for the budget not
  counted), so a peer that stops mid-request, or trickles it (slowloris), is
  closed.
* One ticker task calls ``Broker.poll`` at ``Broker.next_deadline()`` or when
  a request made new work (a parked request, data for parked fetches).
* The broker core is only touched from the trio thread, so it needs no locks.
* Leaving :func:`serve_broker` cancels every task, closes listeners and
  connections, then flushes and closes the logs. No ExceptionGroup escapes it.
* TLS (``SSL`` and ``SASL_SSL`` listeners): each accepted socket is wrapped in a
  ``trio.SSLStream`` whose handshake completes (within
  ``_TLS_HANDSHAKE_TIMEOUT``) before the broker core hears of the connection. A
  failed handshake (a plaintext client, an untrusted client certificate) closes
  that connection only, with a log line. Every byte of a TLS connection goes
  through its stream: the reader never writes directly, every reply goes to the
  writer, and file ranges are read into memory (no ``sendfile``). Closing sends
  TLS's close_notify, bounded by ``_TLS_CLOSE_TIMEOUT`` so that a peer that does
  not read cannot hold up a shutdown. Plaintext connections keep the fast paths
  above unchanged.
* Client quotas (:mod:`.quotas`): a reply with a ``throttle_ms`` is sent, then
  the reader sleeps that long before it reads the connection again (Kafka's
  mute, KIP-219); an acks=0 Produce over its quota mutes the same way. A
  connection over its IP's ``connection_creation_rate`` is never read: it is
  closed after the throttle time.
* SASL is the core's (:mod:`.security.sasl`); the driver only lowers a connection's
  largest accepted frame to ``Broker.connections.max_frame_size`` until it has
  authenticated, sends a :class:`~.handlers._base.Close`'s last answer before
  closing, and writes the bare tokens (:class:`~.handlers._base.SaslToken`)
  answering a v0 SaslHandshake's.

The package: ``connections.py`` (the reader and writer tasks, the ticker),
``writes.py`` (non-blocking writes, ``sendfile``, TLS) and ``launch.py``
(:func:`serve_broker` and the ways to run it).
"""

from .launch import RunningBroker, broker_in_thread, run_broker, serve_broker

__all__ = ["RunningBroker", "broker_in_thread", "run_broker", "serve_broker"]
