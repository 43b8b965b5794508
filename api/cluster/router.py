"""Cache-aware routing of requests over engine replicas (SGLang's router, in Loom's terms).

Random or round-robin routing throws the prefix cache away: with N replicas a conversation's next
turn lands on the replica that holds its KV blocks only 1/N of the time.  ``CacheAwareRouter``
picks, in this order:

1. **session affinity**: a session's requests go to the replica that served it (``sessions``, an
   LRU map of at most ``max_sessions`` ids), unless that replica is down;
2. **longest cached prefix**: a stateless prompt goes to the replica whose *approximate* prefix
   index matches the most leading blocks of its routing key, when that covers at least
   ``cache_threshold`` of the key (SGLang's ``cache_threshold``, 0.5) and the replica is not
   overloaded (its load exceeds the lightest one's by at most ``balance_abs_threshold``);
3. **least loaded**: otherwise, the healthy replica with the lowest load, where load = the
   larger of the requests this router has in flight there and the requests its engine runs or
   queues as it last reported them (``report_load``), +2 when its KV pool is 90% used; ties go
   to the replica holding fewer sessions, then in turn.

A request that creates a session goes to the replica holding the fewest sessions (then the least
loaded), counting creates still in flight: a session's cost is its whole life, and the load at its
first moment says little of it (measured: by load alone, or by sessions counted only once created,
a burst of 16 new sessions split 12 / 4 and 15 / 1 while one replica answered its first create slowly).

The prefix index is what SGLang's router keeps: not the replicas' real caches but a record of what
was sent where.  A routing key (the request's messages as text) is cut into ``block_chars``-byte
blocks, each identified by a hash chained from its parent's (vLLM's block hashes, over bytes instead
of tokens, so the router needs no tokenizer); ``index`` maps a block hash to the replicas it was
sent to, least recently used first out beyond ``max_blocks`` hashes (measured 374 bytes per entry
in CPython, so the default 250k entries take about 90 MB and cover 64 MB of distinct prompt text,
the KV pools of some 160 CPU replicas of 100k tokens each).  A replica marked down loses its entries
(its cache died with it) and its sessions move on their next request.

``policy="round_robin"`` ignores all of this (the comparison baseline); ``policy="single"``
sends everything to the first healthy replica (the one-replica reference).
"""

from __future__ import annotations

import hashlib
import itertools
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

POLICIES = ("cache_aware", "round_robin", "single")
KV_FULL, KV_FULL_PENALTY = 0.9, 2.0


class NoReplicaError(RuntimeError):
    """Every replica is down."""


@dataclass
class ReplicaLoad:
    """What the router knows of one replica's load.

    Attributes:
        in_flight: requests this router sent and has not seen finish.
        num_requests: the engine's running + waiting requests, as last reported (from every
            ingress; with one ingress about ``in_flight``, so the larger of the two counts).
        kv_cache_usage: used / total KV blocks (0-1), as last reported.
        healthy: False once a request to it failed at the connection, until it answers again.
    """

    in_flight: int = 0
    num_requests: int = 0
    kv_cache_usage: float = 0.0
    healthy: bool = True

    @property
    def score(self) -> float:
        """Requests ahead of a new one; a KV pool at least ``KV_FULL`` used counts ``KV_FULL_PENALTY``
        more (it is about to preempt), below that KV use does not matter."""
        kv_full = KV_FULL_PENALTY if self.kv_cache_usage >= KV_FULL else 0.0
        return max(self.in_flight, self.num_requests) + kv_full


@dataclass(frozen=True)
class Route:
    """A routing decision: the replica and why (``session_affinity``, ``prefix_match``,
    ``least_loaded``, ``round_robin``, ``single``), with the prefix blocks it matched."""

    replica: int
    reason: str
    matched_blocks: int = 0


@dataclass
class CacheAwareRouter:
    """Picks a replica per request; thread-safe (one lock, O(key blocks x replicas) per pick).

    Args:
        num_replicas: replicas, numbered ``0..N-1``.
        policy: one of ``POLICIES``.
        block_chars: bytes of routing key per prefix block.
        cache_threshold: least fraction of the key's blocks a replica must hold to win on prefix.
        balance_abs_threshold: most load above the lightest replica a prefix or affinity winner may
            carry before the request goes to the lightest instead (SGLang's ``balance_abs_threshold``);
            session affinity ignores it (a session's cache is on one replica only).
        max_blocks / max_sessions: bounds of the prefix index and the affinity map (LRU).

    Raises:
        ValueError: an unknown policy or fewer than one replica.
    """

    num_replicas: int
    policy: str = "cache_aware"
    block_chars: int = 256
    cache_threshold: float = 0.5
    balance_abs_threshold: float = 8.0
    max_blocks: int = 250_000
    max_sessions: int = 1_000_000
    loads: list[ReplicaLoad] = field(init=False)
    index: OrderedDict[bytes, set[int]] = field(init=False, default_factory=OrderedDict)
    sessions: OrderedDict[str, int] = field(init=False, default_factory=OrderedDict)

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"policy: must be one of {POLICIES}, got {self.policy!r}")
        if self.num_replicas < 1:
            raise ValueError("num_replicas: must be at least 1")
        self.loads = [ReplicaLoad() for _ in range(self.num_replicas)]
        self.pinned = [0] * self.num_replicas  # sessions pinned to each replica
        self._rr = itertools.count()
        self._lock = threading.Lock()

    # -- decisions -------------------------------------------------------------

    def route(self, session_id: str | None = None, key: str | None = None, new_session: bool = False) -> Route:
        """Where to send a request of ``session_id`` (if any) whose routing key is ``key`` (if any);
        ``new_session``: the request creates a session, which goes where the fewest are pinned.

        Raises:
            NoReplicaError: no replica is healthy.
        """
        with self._lock:
            healthy = [i for i, load in enumerate(self.loads) if load.healthy]
            if not healthy:
                raise NoReplicaError("no engine replica is available")
            if self.policy == "round_robin":
                return Route(healthy[next(self._rr) % len(healthy)], "round_robin")
            if self.policy == "single":
                return Route(healthy[0], "single")
            if session_id is not None and session_id in self.sessions:
                replica = self.sessions[session_id]
                if self.loads[replica].healthy:
                    self.sessions.move_to_end(session_id)
                    return Route(replica, "session_affinity")
            if new_session:  # a session's cost is its whole life, not this moment's load
                turn = next(self._rr)
                replica = min(healthy, key=lambda i: (self.pinned[i], self.loads[i].score,
                                                      (i - turn) % self.num_replicas))
                self.pinned[replica] += 1  # reserved while the create runs: a burst must not pile up
                return Route(replica, "fewest_sessions")
            lightest = self._lightest(healthy)
            if key:
                holder, matched, total = self._longest_prefix(key, healthy)
                if (holder is not None and matched >= self.cache_threshold * total
                        and self.loads[holder].score - self.loads[lightest].score <= self.balance_abs_threshold):
                    return Route(holder, "prefix_match", matched)
            return Route(lightest, "least_loaded")

    def forget(self, session_id: str) -> None:
        """A deleted session: unpin it."""
        with self._lock:
            replica = self.sessions.pop(session_id, None)
            if replica is not None:
                self.pinned[replica] -= 1

    def release_reservation(self, replica: int) -> None:
        """The session create routed to ``replica`` answered (its id is then ``record``-ed) or failed."""
        with self._lock:
            self.pinned[replica] = max(0, self.pinned[replica] - 1)

    def _lightest(self, healthy: list[int]) -> int:
        # ties (an idle cluster, a burst of new sessions) go to the replica holding fewer sessions,
        # then in turn: a burst must not pile onto replica 0 before any load report moves
        turn = next(self._rr)
        return min(healthy, key=lambda i: (self.loads[i].score, self.pinned[i], (i - turn) % self.num_replicas))

    def record(self, replica: int, session_id: str | None = None, key: str | None = None) -> None:
        """Remember that ``replica`` now holds ``session_id`` and the KV blocks of ``key``."""
        with self._lock:
            if session_id is not None:
                before = self.sessions.get(session_id)
                if before != replica:
                    if before is not None:
                        self.pinned[before] -= 1
                    self.pinned[replica] += 1
                self.sessions[session_id] = replica
                self.sessions.move_to_end(session_id)
                while len(self.sessions) > self.max_sessions:
                    _, gone = self.sessions.popitem(last=False)
                    self.pinned[gone] -= 1
            for h in _block_hashes(key or "", self.block_chars):
                holders = self.index.get(h)
                if holders is None:
                    self.index[h] = holders = set()
                holders.add(replica)
                self.index.move_to_end(h)
            while len(self.index) > self.max_blocks:
                self.index.popitem(last=False)

    def _longest_prefix(self, key: str, healthy: list[int]) -> tuple[int | None, int, int]:
        hashes = _block_hashes(key, self.block_chars)
        alive, matched = set(healthy), 0
        best: int | None = None
        for depth, h in enumerate(hashes, 1):
            holders = self.index.get(h, set()) & alive
            if not holders:
                break
            alive, matched = holders, depth
            best = min(holders, key=lambda i: (self.loads[i].score, i))
            self.index.move_to_end(h)
        return best, matched, len(hashes)

    # -- load and health -------------------------------------------------------

    def started(self, replica: int) -> None:
        """A request was sent to ``replica``."""
        with self._lock:
            self.loads[replica].in_flight += 1

    def finished(self, replica: int) -> None:
        """A request sent to ``replica`` ended (answered, failed or abandoned)."""
        with self._lock:
            self.loads[replica].in_flight = max(0, self.loads[replica].in_flight - 1)

    def report_load(self, replica: int, num_requests: int, kv_cache_usage: float) -> None:
        """The replica's own figures (its engine's running + waiting requests, KV use); it answered: up."""
        with self._lock:
            load = self.loads[replica]
            load.num_requests, load.kv_cache_usage, load.healthy = num_requests, kv_cache_usage, True

    def mark_down(self, replica: int) -> None:
        """``replica`` stopped answering: no more requests, and its cache entries are gone."""
        with self._lock:
            self.loads[replica].healthy = False
            self.loads[replica].in_flight = 0
            for h in [h for h, holders in self.index.items() if replica in holders]:
                holders = self.index[h]
                holders.discard(replica)
                if not holders:
                    del self.index[h]

    def stats(self) -> dict[str, object]:
        """Sizes of the router's state (for ``/metrics`` and the README's 100-replica estimate)."""
        with self._lock:
            return {"prefix_blocks": len(self.index), "sessions": len(self.sessions),
                    "healthy": [load.healthy for load in self.loads]}


def _block_hashes(key: str, block_chars: int) -> list[bytes]:
    """Chained hashes of ``key``'s full ``block_chars``-byte blocks (a partial tail is not indexed)."""
    data = key.encode("utf-8")
    hashes, parent = [], b""
    for start in range(0, len(data) - block_chars + 1, block_chars):
        parent = hashlib.blake2b(parent + data[start:start + block_chars], digest_size=16).digest()
        hashes.append(parent)
    return hashes
