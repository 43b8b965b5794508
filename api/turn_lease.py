"""One turn at a time per session, across every worker on the database: the turn lease.

``TurnLeaseKeeper.claim`` takes the session's lease row (``Store.claim_lease``,
one atomic statement) or raises :class:`SessionBusyError` (409); while held, a
background task renews it every third of its time to live, so a long turn
keeps it and a crashed worker's lease lapses.  ``release`` is idempotent: a
turn calls it from every way out (answer sent, error, client gone).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import anyio

from loom.api.errors import SessionBusyError
from loom.api.store import Store, new_holder

log = logging.getLogger(__name__)


class TurnLeaseKeeper:
    """The lease of one session held by this process for one turn (or one delete)."""

    def __init__(self, store: Store, session_id: str, ttl_s: float) -> None:
        self.store, self.session_id, self.ttl_s = store, session_id, ttl_s
        self.holder = new_holder()
        self._renewer: asyncio.Task[None] | None = None
        self._released = False

    @classmethod
    async def claim(cls, store: Store, session_id: str, ttl_s: float) -> TurnLeaseKeeper:
        """Hold ``session_id``'s lease (renewed until ``release``).

        Raises:
            SessionBusyError: another turn on the session runs now (here or in another worker).
        """
        keeper = cls(store, session_id, ttl_s)
        if not await anyio.to_thread.run_sync(store.claim_lease, session_id, keeper.holder, ttl_s):
            raise SessionBusyError(
                f"Session {session_id!r} is already running a turn; send the next message when it "
                "has finished.", param="session_id")
        keeper._renewer = asyncio.ensure_future(keeper._renew())
        return keeper

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(self.ttl_s / 3)
            held = await anyio.to_thread.run_sync(self.store.renew_lease, self.session_id, self.holder,
                                                  self.ttl_s)
            if not held:  # only after a stall longer than the lease: another turn may run now
                log.warning("session %s: turn lease lost while the turn ran", self.session_id)
                return

    async def release(self) -> None:
        """Stop renewing and give the lease back (once; later calls do nothing)."""
        if self._released:
            return
        self._released = True
        with anyio.CancelScope(shield=True):
            if self._renewer is not None:
                self._renewer.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await self._renewer
            await anyio.to_thread.run_sync(self.store.release_lease, self.session_id, self.holder)
