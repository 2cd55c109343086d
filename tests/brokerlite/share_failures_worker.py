"""A share-group worker (trafka's ShareConsumer, explicit acknowledgement), run as
a subprocess by test_share_failures.py, which kills it with SIGKILL at arbitrary
points.

    python share_failures_worker.py SERVERS TOPIC GROUP OUTPUT PAUSE_MS

Each record's value is a number. The worker "processes" a poll's records by
appending one line per record, ``NUMBER DELIVERY_COUNT``, to OUTPUT (flushed and
fsynced) before it accepts them, waits PAUSE_MS (the window where a kill
leaves processed records unaccepted), then commits the acknowledgements. A kill may
land anywhere: before the write (the records come back), between the fsync and
the commit (they come back and are processed twice, as at-least-once allows) or
mid-write (a torn last line, whose record was not accepted). It runs until
killed.
"""

from __future__ import annotations

import os
import sys

import anyio

from trafka.sdk import ShareConsumer


async def main(servers: str, topic: str, group: str, output: str, pause_ms: int) -> None:
    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    async with ShareConsumer(
        bootstrap_servers=servers,
        group_id=group,
        share_acknowledgement_mode="explicit",
        max_poll_records=10,
        default_api_timeout_ms=10_000,
        reconnect_backoff_ms=20,
        reconnect_backoff_max_ms=200,
        retry_backoff_ms=20,
    ) as consumer:
        consumer.subscribe([topic])
        while True:
            records = await consumer.poll(timeout_ms=500)
            if not records:
                continue
            lines = "".join(f"{int(r.value)} {r.delivery_count}\n" for r in records)
            data = lines.encode()
            while data:
                data = data[os.write(fd, data) :]
            os.fsync(fd)
            await anyio.sleep(pause_ms / 1000)
            for record in records:
                consumer.acknowledge(record)
            # Per partition None or the error (INVALID_RECORD_STATE when a lock ran
            # out, an error when the broker went away): such records come back.
            await consumer.commit()


if __name__ == "__main__":
    servers, topic, group, output, pause_ms = sys.argv[1:6]
    anyio.run(main, servers, topic, group, output, int(pause_ms), backend="trio")
