"""The cluster's delegation tokens through ZooKeeper: written by any broker, followed by all.

What the znodes hold is decided in :mod:`trafka.brokerlite.security.zk_tokens`
(Kafka's layout, no HMAC); :class:`TokenSync` only reads and writes them, and
hands them to the broker's token manager.

Rules:

* Writing (a task of CreateDelegationToken, Renew, Expire, or the expiry
  sweep): each changed token's znode is set (created if new), each removed
  one deleted, as Kafka's ``DelegationTokenManagerZk`` does (unconditionally:
  a token has one writer at a time, the broker its owner asked), then a
  ``/delegation_token/token_changes`` notification names the token. After the
  task, successful or not, the broker reads every token back, so what it
  keeps is what ZooKeeper holds.
* Following: the broker watches the token changes; a new notification makes
  it read every token znode again and hand them to its token manager
  (:meth:`~trafka.brokerlite.security.delegation_tokens.DelegationTokens.use_cluster`).
  The same reading happens when the broker joins, before it serves.
* A token znode Kafka's layout does not allow is logged and skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import trio

from ...security.delegation_tokens import DelegationTokens, TokenInfo, TokenWrite
from ...security.zk_tokens import (
    TOKEN_CHANGES,
    TOKENS,
    decode_token,
    encode_token,
    token_change_notification,
    token_path,
)
from ..zk_layout import ZkDataError
from .metadata_sync import Kick, MetadataSync, RunSoon

__all__ = ["TokenSync"]

log = logging.getLogger("trafka.brokerlite.cluster")


class TokenSync(MetadataSync):
    """The cluster's delegation tokens, followed into ``tokens`` (see the module
    rules; the other arguments are :class:`MetadataSync`'s)."""

    changes = (TOKEN_CHANGES,)
    what = "delegation tokens"

    def __init__(
        self,
        zk: Any,
        run_soon: RunSoon,
        kick: Kick,
        clock: Callable[[], int],
        *,
        tokens: DelegationTokens,
    ) -> None:
        super().__init__(zk, run_soon, kick, clock)
        self._tokens = tokens

    def _read_all_tokens(self) -> dict[str, TokenInfo]:
        """Every token in ZooKeeper (run in a thread)."""
        from kazoo.exceptions import NoNodeError

        out: dict[str, TokenInfo] = {}
        try:
            children = self.zk.get_children(TOKENS)
        except NoNodeError:
            return out
        for child in children:
            path = f"{TOKENS}/{child}"
            try:
                data, _ = self.zk.get(path)
                token = decode_token(path, data)
            except NoNodeError:
                continue
            except ZkDataError as exc:
                log.warning("ignoring a delegation token: %s", exc)
                continue
            if token is not None and token.token_id == child:
                out[child] = token
            elif token is not None:
                log.warning("ignoring %s: it holds token %r", path, token.token_id)
        return out

    def _write_tokens(self, writes: list[TokenWrite]) -> None:
        """Put and remove tokens, then notify (run in a thread)."""
        from kazoo.exceptions import NodeExistsError, NoNodeError

        for write in writes:
            if isinstance(write, TokenInfo):
                token_id = write.token_id
                path, data = token_path(token_id), encode_token(write)
                try:
                    self.zk.set(path, data)
                except NoNodeError:
                    try:
                        self.zk.create(path, data, makepath=True)
                    except NodeExistsError:
                        self.zk.set(path, data)
            else:
                token_id = write
                try:
                    self.zk.delete(token_path(token_id))
                except NoNodeError:
                    pass
            prefix, content = token_change_notification(token_id)
            self.zk.create(prefix, content, sequence=True, makepath=True)

    def watch(self) -> None:
        """Watch the token change notifications (run in a thread, once joined)."""
        self.zk.ensure_path(TOKENS)
        super().watch()

    async def _apply(self) -> None:
        self._tokens.use_cluster(await trio.to_thread.run_sync(self._read_all_tokens))

    async def change(self, writes: list[TokenWrite]) -> None:
        """Write a token task's changes, then (even if that failed) read every token
        back."""
        try:
            await trio.to_thread.run_sync(self._write_tokens, writes)
        finally:
            await self.load()
