"""Paged KV cache bookkeeping with automatic prefix caching.

The pool is a fixed number of blocks of ``block_size`` token slots each
(PagedAttention, Kwon et al. 2023, arXiv 2309.06180).  A request's block table
lists its blocks in token order; token ``i`` lives in slot
``block_ids[i // block_size] * block_size + i % block_size``.

Prefix caching follows vLLM's automatic prefix caching: every *full* block is
identified by a hash chained from its parent block's hash and its own token
ids, so equal hashes mean equal whole prefixes.  ``cached`` maps hash -> block.
Blocks are reference counted; a block whose count drops to 0 goes to the tail
of the free queue but keeps its hash, so a later request with the same prefix
can take it back.  Allocation pops the head of the free queue, i.e. evicts the
least recently freed block (LRU), dropping its hash.  A block's hash is
registered when the step that computes its last token is scheduled (as vLLM
does), so a request admitted later in the same step already shares it; this is
safe because each layer writes every token's K/V into the cache before any
token attends.  Registrations stay *uncommitted* until that step's forward pass
has returned (``commit``): if it raises, ``discard_uncommitted`` drops their
hashes, so no later request is ever served KV that was never written.

A request with ``SamplingParams.cache_salt`` starts its chain from that salt
(vLLM's ``cache_salt``): its first block's hash, and the keys its partial
blocks are found by, differ from every other salt's and from unsalted
requests', so it shares cached blocks only with requests of the same salt
(one tenant of a shared server cannot probe another's prompts through cached
token counts or TTFT).

A request's *partial* last block is kept too, at token granularity (as
SGLang's radix cache keeps every token; vLLM drops it): when the request
frees its blocks, the computed tokens of its last, not-full block are
registered under the hash of the full prefix before them (``tails``).  A
later request whose tokens continue that prefix with the same first ``m``
tokens takes the block itself: the block has no other holder, so its first
``m`` slots count as cached and the request writes its own tokens over the
rest.  In a multi-turn conversation the next turn's prompt then gets the
whole previous prompt and reply from the cache (all but the last sampled
token, whose KV was never computed), not just its full blocks: on a short
turn of 47 tokens that is 46 instead of 32.  Taking the block drops its
registration; allocation drops it when the block is evicted.

A *full* cached block can serve its first ``m`` tokens too, by copy: when a
request diverges inside a block that another request already filled (a
session forked at an item its parent has since written past, a regenerated
or edited last message), no tail exists any more, but the full block whose
parent is the request's last full hit and whose first ``m`` tokens match is
still cached.  It cannot be taken in place (it is registered, maybe shared,
and the request would overwrite its slots ``m..``), so the request gets a
fresh block and the step copies the source block's KV into it before the
forward pass (``blocks_to_copy``, as vLLM v0's copy-on-write; SGLang's radix
cache gets the same effect by splitting a node).  Full blocks are indexed by
(parent hash, first token) for this lookup (``children``).  The copy runs at
the start of the step that admits the request, before any layer writes KV, so
the source may even be evicted by that same step's allocations; for the same
reason a block registered by the step being scheduled (its KV not yet
written) is no source.  A tail, which needs no copy, wins a tie.

Prefix-cache counters (``prefix_cache_queries`` / ``prefix_cache_hits``,
tokens) count once per admission, when the request's blocks are allocated
(``record_admission``), as vLLM does: a request waiting for free blocks is not
counted again at every step it waits, and a preempted request is counted again
when it is admitted again (its recomputed tokens are real queries).

Retention (``SamplingParams.kv_retention``, :mod:`loom.runtime.kv_retention`):
when a request that asks for it finishes, the canonical cached blocks of its
prompt and output (the ones ``cached`` maps its hashes to) and its partial
last block are pinned under the retention's key until a deadline; the key's
next finished request replaces them (blocks no longer named are unpinned and
join the LRU tail as recently used).  A free pinned block waits in
``retained`` instead of the free queue: allocation takes the free queue first
and a retained block only when the queue is empty: first a block that only
sessions waiting for their user pin (``waiting_on_tool`` false), the least
recently pinned first (as LRU); then a block of a session waiting for a tool,
the one whose deadline is furthest first (it is expected back last).  The
caller that reads the reply re-times a key's pin (``retain``): a tool wait or
an idle wait, and for how long.  A pin whose deadline passes
(``expire_pins``, run by the scheduler each step) sends its free block to the
*head* of the queue: it was expected back and did not come.  A key pins at
most ``retention_max_fraction`` of the pool (the leading blocks, which every
later call of the session shares); a ttl is capped at ``retention_max_ttl_s``.

Misses are accounted by cause: at each admission the prompt tokens that were
not served are classed ``evicted`` (their block was cached and evicted under
pressure), ``expired`` (evicted after its pin expired) or ``new`` (never cached
as a full block: new text, a partial block, or a block after an earlier miss
that is no longer cached).  A block still cached behind an earlier miss takes
that miss's cause.  The eviction log is bounded (4x the pool, oldest dropped).

Invariant (``check_invariants``): free blocks (free queue + retained) + blocks
with ``ref_cnt > 0`` == pool, and each ref count equals the number of block
tables holding the block.
"""

from __future__ import annotations

import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch

from loom.runtime.kv_retention import MISS_REASONS
from loom.runtime.kv_tier import DiskKVTier, chain_keys
from loom.runtime.request import Request

logger = logging.getLogger(__name__)


@dataclass
class KVBlock:
    """One block of ``block_size`` KV slots.

    Attributes:
        block_id: index in the pool (and in the KV tensors' block dimension).
        ref_cnt: number of requests whose block table holds this block.
        block_hash: chained hash when the block is full and registered.
        token_ids: the block's tokens when hashed (guards against collisions).
        parent_hash: for a registered full block, the hash of the full prefix
            before it (``_NO_PARENT``, or a salted root, for a first block); its ``children`` key.
        tail_parent: for a registered partial block, the hash of the full
            prefix before it (``_NO_PARENT``, or a salted root, for a first block); else ``None``.
        tail_tokens: the computed tokens of a registered partial block.
        tier_key: for a registered full block, its key in the disk tier (``loom.runtime.kv_tier``).
    """

    block_id: int
    ref_cnt: int = 0
    block_hash: int | None = None
    token_ids: tuple[int, ...] = ()
    parent_hash: object = None
    tail_parent: object = None
    tail_tokens: tuple[int, ...] = ()
    tier_key: bytes | None = None


_NO_PARENT = "root"  # tails key of a partial first block (no full block before it)


@dataclass
class Pin:
    """One key's retention pin, shared by the blocks it holds.

    Attributes:
        deadline: when it lapses (``clock`` seconds).
        waiting_on_tool: the session waits for a tool (back soon: kept longest) rather than
            for its user (an idle wait).
        since: when it was set or last re-timed (``clock`` seconds).
    """

    deadline: float
    waiting_on_tool: bool
    since: float


class ComputedBlocks(NamedTuple):
    """A request's prefix-cache hit (``KVCacheManager.get_computed_blocks``).

    Attributes:
        block_ids: blocks to take into the block table: full blocks, then
            maybe one registered partial block (a tail).
        num_tokens: tokens of the hit, counting the matched leading tokens of
            a tail or of ``copy_from``.
        copy_from: a cached full block whose first ``num_tokens - len(block_ids)
            * block_size`` tokens continue ``block_ids``; its KV is copied into
            the request's next, freshly allocated block.  ``None``: no copy.
        loaded: full blocks after ``block_ids`` read from the disk tier (each
            ``[2, layers, block_size, kv_heads, head_dim]``), loaded into fresh
            blocks before the step's forward pass; their tokens count in ``num_tokens``.
    """

    block_ids: list[int]
    num_tokens: int
    copy_from: int | None = None
    loaded: list[torch.Tensor] = []


def _unindex(index: dict[tuple[object, int], set[int]], key: tuple[object, int], block_id: int) -> None:
    """Remove ``block_id`` from ``index[key]`` (``tails`` or ``children``), dropping an emptied key."""
    peers = index.get(key)
    if peers is not None:
        peers.discard(block_id)
        if not peers:
            del index[key]


def hash_block(parent_hash: object, token_ids: Sequence[int]) -> int:
    """Chained block hash: equal values mean equal whole prefixes (vLLM APC).  A first block's parent is
    ``None``, or ``("salt", cache_salt)`` for a salted request, so salted chains never meet other chains."""
    return hash((parent_hash, tuple(token_ids)))


def _root(request: Request) -> object:
    """The parent key of ``request``'s first block: :data:`_NO_PARENT`, or its ``cache_salt``'s own root."""
    salt = request.sampling_params.cache_salt
    return _NO_PARENT if salt is None else ("salt", salt)


class KVCacheManager:
    """Allocates KV blocks to requests and shares full blocks by prefix hash."""

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True, *,
                 retention_max_fraction: float = 0.5, retention_max_ttl_s: float = 3600.0,
                 clock: Callable[[], float] = time.monotonic, tier: DiskKVTier | None = None) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [KVBlock(i) for i in range(num_blocks)]
        self.free_queue: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self.cached: dict[int, int] = {}
        # (parent hash, first token) -> free partial blocks continuing that prefix with that token: an
        # admission scans only blocks that can match at least one token
        self.tails: dict[tuple[object, int], set[int]] = {}
        # (parent hash, first token) -> registered full blocks, the sources of copied partial hits
        self.children: dict[tuple[object, int], set[int]] = {}
        self.blocks_to_copy: list[tuple[int, int]] = []  # (src, dst) of the step being scheduled
        self._unwritten: set[int] = set()  # copy destinations of a failed step: never a tail
        self._num_registered: dict[str, int] = {}
        self._uncommitted: list[int] = []
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0
        # retention (see the module docstring)
        self.retention_max_blocks = max(1, int(retention_max_fraction * num_blocks))
        self.retention_max_ttl_s = retention_max_ttl_s
        self.clock = clock
        self.retained: dict[int, None] = {}  # free blocks under a live pin, out of the free queue
        self.pins: dict[int, dict[str, Pin]] = {}  # block -> {key: that key's pin}
        self.key_pins: dict[str, Pin] = {}
        self.pinned_by_key: dict[str, set[int]] = {}
        self._next_expiry = math.inf
        self._expired: set[int] = set()  # free blocks whose pin expired (an eviction then counts as "expired")
        self.evicted: OrderedDict[int, str] = OrderedDict()  # block hash -> "evicted" | "expired"
        self.miss_tokens = dict.fromkeys(MISS_REASONS, 0)
        # the disk tier (loom.runtime.kv_tier): blocks to write before the step overwrites them, blocks to load
        self.tier = tier
        self.blocks_to_save: list[tuple[int, bytes]] = []
        self.blocks_to_load: list[tuple[int, torch.Tensor]] = []
        self.prefix_cache_tier_hits = 0

    @property
    def num_free_blocks(self) -> int:
        """Blocks nobody holds (some may still be cached and reusable; retained ones are taken last)."""
        return len(self.free_queue) + len(self.retained)

    def blocks_needed(self, num_tokens: int) -> int:
        """Blocks that ``num_tokens`` tokens occupy."""
        return -(-num_tokens // self.block_size)

    def get_computed_blocks(self, request: Request) -> ComputedBlocks:
        """Longest cached prefix of ``request``, at token granularity.

        At least the last token is always left to compute, so the step that
        finishes the prompt still produces logits.  A request asking for
        ``prompt_logprobs`` gets no hit: its whole prompt is computed so every
        position has logits (as vLLM).

        Returns:
            full blocks, then the partial match sharing the most leading tokens
            of the next block: a registered partial block (taken in place) or a
            cached full block (copied, ``copy_from``).
        """
        if not self.enable_prefix_caching or request.sampling_params.prompt_logprobs is not None:
            return ComputedBlocks([], 0)
        self._update_hashes(request)
        bs = self.block_size
        max_blocks = (request.num_tokens - 1) // bs
        hits: list[int] = []
        for i, block_hash in enumerate(request.block_hashes[:max_blocks]):
            block_id = self.cached.get(block_hash)
            if block_id is None or not self._same_tokens(request, i, block_id):
                break
            hits.append(block_id)
        loaded = self._tier_hits(request, len(hits), max_blocks)
        num_full = len(hits) + len(loaded)
        num_hit = num_full * bs
        parent = request.block_hashes[num_full - 1] if num_full else _root(request)
        start = num_hit
        want = request.all_token_ids[start:min(start + bs, request.num_tokens - 1)]
        if not want:
            return ComputedBlocks(hits, num_hit, None, loaded)
        tail, m = self._longest_match(self.tails.get((parent, want[0])), want, "tail_tokens")
        sources = self.children.get((parent, want[0]))
        if sources and self._uncommitted:  # registered this step: its KV is written only by the forward pass
            sources = sources.difference(self._uncommitted)
        src, m_full = self._longest_match(sources, want, "token_ids")
        if m_full > m:
            return ComputedBlocks(hits, num_hit + m_full, src, loaded)
        if tail is not None and not loaded:  # a tail follows the pool's own blocks only
            return ComputedBlocks(hits + [tail], num_hit + m)
        return ComputedBlocks(hits, num_hit, None, loaded)

    def _tier_keys(self, request: Request) -> list[bytes]:
        """``request``'s stable block keys (the tier's), extended to its full blocks."""
        assert self.tier is not None
        keys, bs = request.tier_keys, self.block_size
        if len(keys) < request.num_tokens // bs:
            keys += chain_keys(self.tier.fingerprint, request.sampling_params.cache_salt, request.all_token_ids, bs,
                               start=len(keys), prev=keys[-1] if keys else None)
        return keys

    def _tier_hits(self, request: Request, first: int, max_blocks: int) -> list[torch.Tensor]:
        """The blocks ``first..`` of ``request`` the disk tier holds, in a row, read and verified.

        Kept on the request until its allocation takes them: a request waiting for free blocks is
        looked up again every step, and reads its files once."""
        if self.tier is None or first >= max_blocks:
            return []
        if request.tier_staged is not None and request.tier_staged[0] == first:
            return request.tier_staged[1]
        loaded = self.tier.get_run(self._tier_keys(request)[first:max_blocks])
        request.tier_staged = (first, loaded)
        return loaded

    def _longest_match(self, candidates: set[int] | None, want: Sequence[int], field: str) -> tuple[int | None, int]:
        """The block among ``candidates`` whose ``field`` tokens share the most leading tokens
        with ``want``, and how many."""
        best, best_m = None, 0
        for block_id in candidates or ():
            have = getattr(self.blocks[block_id], field)
            m = 0
            for a, b in zip(have, want):
                if a != b:
                    break
                m += 1
            if m > best_m:
                best, best_m = block_id, m
        return best, best_m

    def record_admission(self, request: Request, num_hit_tokens: int) -> None:
        """Count one admission of ``request`` in the prefix-cache counters (tokens),
        the engine's and the request's own (``Request.record_admission``).

        Called once the admission's blocks are allocated; with prefix caching
        off the engine counts nothing (as vLLM).
        """
        request.record_admission(num_hit_tokens)
        if self.enable_prefix_caching:
            self.prefix_cache_queries += request.num_tokens
            self.prefix_cache_hits += num_hit_tokens
            misses = self._classify_misses(request, num_hit_tokens)
            for reason, n in misses.items():
                self.miss_tokens[reason] += n
            if request.kv_miss_tokens is None:
                request.kv_miss_tokens = misses

    def _classify_misses(self, request: Request, num_hit: int) -> dict[str, int]:
        """The tokens of ``request`` past its hit, by cause (``MISS_REASONS``; see the module docstring)."""
        self._update_hashes(request)
        bs, n = self.block_size, request.num_tokens
        out = dict.fromkeys(MISS_REASONS, 0)
        first_cause: str | None = None
        covered = num_hit
        for i in range(num_hit // bs, min(len(request.block_hashes), n // bs)):
            block_hash = request.block_hashes[i]
            cause = self.evicted.get(block_hash)
            if cause is None:
                cause = first_cause if block_hash in self.cached and first_cause is not None else "new"
            first_cause = first_cause or cause
            out[cause] += (i + 1) * bs - max(i * bs, num_hit)
            covered = (i + 1) * bs
        out["new"] += n - max(covered, num_hit)
        return out

    def take_blocks_to_copy(self) -> list[tuple[int, int]]:
        """The (source, destination) block copies of the step just scheduled, in order."""
        copies, self.blocks_to_copy = self.blocks_to_copy, []
        return copies

    def commit(self) -> None:
        """The step's forward pass wrote its KV: its registered blocks become reusable for good."""
        self._uncommitted.clear()

    def discard_uncommitted(self, copied: Sequence[tuple[int, int]] = ()) -> None:
        """The step's forward pass failed: forget the hashes registered since ``commit``.

        Their blocks stay in their requests' tables (the caller frees or
        recomputes those requests) but no later lookup can hit them; the
        step's copy destinations may not hold their copy, so they never
        become tails.

        Args:
            copied: the failed step's ``blocks_to_copy``.
        """
        for block_id in self._uncommitted:
            self._drop_hash(self.blocks[block_id])
        self._uncommitted.clear()
        self._unwritten.update(dst for _, dst in copied)

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        new_computed_blocks: Sequence[int] = (),
        num_lookahead_tokens: int = 0,
        num_hit_tokens: int | None = None,
        copy_from: int | None = None,
        loaded: Sequence[torch.Tensor] = (),
    ) -> bool:
        """Grow ``request``'s block table to hold the tokens of this step.

        Args:
            request: the request (its ``num_computed_tokens`` not yet counting
                ``new_computed_blocks``).
            num_new_tokens: tokens computed this step.
            new_computed_blocks: prefix-cache hits to take (first scheduling only).
            num_lookahead_tokens: extra slots (speculative drafts).
            num_hit_tokens: tokens of the hit, when it ends inside a block
                (``get_computed_blocks``' count); default: whole blocks.
            copy_from: ``ComputedBlocks.copy_from``: the first block allocated
                here after the loaded ones receives its KV (queued in ``blocks_to_copy``).
            loaded: ``ComputedBlocks.loaded``: the first fresh blocks receive them
                (queued in ``blocks_to_load``).

        Returns:
            False, changing nothing, when the free pool is too small.
        """
        num_hit = len(new_computed_blocks) * self.block_size if num_hit_tokens is None else num_hit_tokens
        num_computed = request.num_computed_tokens + num_hit
        total = num_computed + num_new_tokens + num_lookahead_tokens
        need = self.blocks_needed(total) - len(request.block_ids) - len(new_computed_blocks)
        reused_free = sum(1 for b in new_computed_blocks if self.blocks[b].ref_cnt == 0)
        if need > self.num_free_blocks - reused_free:
            return False
        for block_id in new_computed_blocks:
            block = self.blocks[block_id]
            if block.ref_cnt == 0:
                self._take_free(block_id)
            block.ref_cnt += 1
            self._drop_tail(block)  # a partial block taken is written from its first unmatched slot on
        request.block_ids.extend(new_computed_blocks)
        if new_computed_blocks:
            self._num_registered[request.request_id] = num_computed // self.block_size
        fresh_start = len(request.block_ids)
        victims = self._victims()  # sorted on first use only: most allocations never reach a retained block
        for _ in range(max(need, 0)):
            request.block_ids.append(self._pop_free_block(victims))
        request.tier_staged = None
        for i, kv in enumerate(loaded):
            self.blocks_to_load.append((request.block_ids[fresh_start + i], kv))
        if loaded and request.kv_tier_tokens is None:
            request.kv_tier_tokens = len(loaded) * self.block_size
            self.prefix_cache_tier_hits += request.kv_tier_tokens
        if copy_from is not None:
            self.blocks_to_copy.append((copy_from, request.block_ids[fresh_start + len(loaded)]))
        if self.enable_prefix_caching:
            self._register_full_blocks(request, num_computed + num_new_tokens)
        return True

    def free(self, request: Request, finished: bool = False) -> None:
        """Release ``request``'s blocks; tail blocks first so they are evicted first.

        With prefix caching the computed tokens of a partial last block are
        registered as a tail (see the module docstring).  A ``finished``
        request with ``kv_retention`` pins its blocks first (a preempted one
        never does: it comes back at once).
        """
        if self.enable_prefix_caching:
            self._register_tail(request)
            if finished and request.sampling_params.kv_retention is not None:
                self._pin(request)
        for block_id in reversed(request.block_ids):
            block = self.blocks[block_id]
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                self._release(block_id)
        request.block_ids = []
        self._num_registered.pop(request.request_id, None)

    def free_tail(self, request: Request, num_tokens: int) -> None:
        """Release the blocks past the first ``num_tokens`` tokens of ``request``.

        Speculative decoding reserves slots for drafted tokens; after
        verification the rejected drafts' blocks come back here.  Those blocks
        never hold a registered (hashed) prefix, so they go to the head of the
        free queue, to be reused before any cached block is evicted.
        """
        keep = self.blocks_needed(num_tokens)
        tail = request.block_ids[keep:]
        del request.block_ids[keep:]
        for block_id in tail:
            block = self.blocks[block_id]
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                self._release(block_id, evict_first=True)

    def stats(self) -> dict[str, int]:
        """Pool counters: total, free, cached (hashed), pinned and retained (pinned and free) blocks;
        prefix-cache tokens: queried, hit, and missed by cause (``prefix_cache_misses_<cause>``)."""
        return {
            "kv_blocks_total": self.num_blocks,
            "kv_blocks_free": self.num_free_blocks,
            "kv_blocks_cached": len(self.cached),
            "kv_blocks_pinned": len(self.pins),
            "kv_blocks_retained": len(self.retained),
            "prefix_cache_queries": self.prefix_cache_queries,
            "prefix_cache_hits": self.prefix_cache_hits,
            **{f"prefix_cache_misses_{reason}": n for reason, n in self.miss_tokens.items()},
            **({"prefix_cache_tier_hits": self.prefix_cache_tier_hits, **self.tier.stats()}
               if self.tier is not None else {}),
        }

    def take_blocks_to_save(self) -> list[tuple[int, bytes]]:
        """(block, tier key) of the cached full blocks this step evicts: write them before the step runs."""
        saves, self.blocks_to_save = self.blocks_to_save, []
        return saves

    def take_blocks_to_load(self) -> list[tuple[int, torch.Tensor]]:
        """(block, KV) read from the tier for this step: load them after its copies, before its forward pass."""
        loads, self.blocks_to_load = self.blocks_to_load, []
        return loads

    def pinned_blocks_to_save(self) -> list[tuple[int, bytes]]:
        """(block, tier key) of every pinned block the tier lacks: what a shutdown writes."""
        tier = self.tier
        if tier is None:
            return []
        keyed = ((b, self.blocks[b].tier_key) for b in self.pins)
        return [(b, key) for b, key in keyed if key is not None and key not in tier]

    # -- retention ---------------------------------------------------------

    def expire_pins(self) -> None:
        """Drop the pins whose deadline passed; their free blocks go to the head of the free queue."""
        now = self.clock()
        if now < self._next_expiry:
            return
        for key, pin in list(self.key_pins.items()):
            if pin.deadline <= now:
                for block_id in self._unpin_key(key):
                    if block_id in self.free_queue:
                        self.free_queue.move_to_end(block_id, last=False)  # expected back and did not come
                        self._expired.add(block_id)
        self._next_expiry = min((p.deadline for p in self.key_pins.values()), default=math.inf)

    def retain(self, key: str, ttl_s: float, waiting_on_tool: bool = False) -> int:
        """Re-time ``key``'s pins: ``ttl_s`` from now (capped), as a tool wait or an idle wait;
        ``ttl_s <= 0`` releases them.

        The caller learned how the blocks are expected back after the request that pinned them
        ended (an agent whose reply called a tool: the tool's time; one that answered: its
        user's).

        Returns:
            the blocks ``key`` holds pinned afterwards.
        """
        pin = self.key_pins.get(key)
        if ttl_s <= 0 or pin is None:
            self.release_pins(key)
            return 0
        now = self.clock()
        pin.deadline, pin.waiting_on_tool, pin.since = now + min(ttl_s, self.retention_max_ttl_s), waiting_on_tool, now
        self._next_expiry = min(self._next_expiry, pin.deadline)
        return len(self.pinned_by_key.get(key, ()))

    def release_pins(self, key: str) -> int:
        """Unpin every block ``key`` pinned (its free ones join the LRU tail); returns how many."""
        return len(self._unpin_key(key))

    def _unpin_key(self, key: str) -> set[int]:
        """Drop ``key``'s pin; blocks no other key pins leave ``retained`` for the free queue's tail."""
        self.key_pins.pop(key, None)
        blocks = self.pinned_by_key.pop(key, set())
        for block_id in blocks:
            keys = self.pins.get(block_id)
            if keys is None:
                continue
            keys.pop(key, None)
            if not keys:
                del self.pins[block_id]
                if block_id in self.retained:
                    del self.retained[block_id]
                    self.free_queue[block_id] = None
        return blocks

    def _pin(self, request: Request) -> None:
        """Pin ``request``'s canonical cached blocks and its tail under its retention key."""
        retention = request.sampling_params.kv_retention
        assert retention is not None
        self._update_hashes(request)
        chosen: list[int] = []
        for block_hash in request.block_hashes[:request.num_computed_tokens // self.block_size]:
            block_id = self.cached.get(block_hash)
            if block_id is None:
                break
            chosen.append(block_id)
        num_full = request.num_computed_tokens // self.block_size
        if len(chosen) == num_full and num_full < len(request.block_ids):
            tail = self.blocks[request.block_ids[num_full]]
            if tail.tail_parent is not None:
                chosen.append(tail.block_id)
        chosen = chosen[:self.retention_max_blocks]
        self.release_pins(retention.key)
        now = self.clock()
        pin = Pin(now + min(retention.ttl_s, self.retention_max_ttl_s), retention.waiting_on_tool, now)
        self.key_pins[retention.key] = pin
        for block_id in chosen:
            self.pins.setdefault(block_id, {})[retention.key] = pin
            self._expired.discard(block_id)
            if block_id in self.free_queue:  # a canonical block another request left free
                del self.free_queue[block_id]
                self.retained[block_id] = None
        self.pinned_by_key[retention.key] = set(chosen)
        self._next_expiry = min(self._next_expiry, pin.deadline)

    def _victims(self) -> Iterator[int]:
        """Retained blocks in the order they are evicted when nothing else is free: blocks only idle
        sessions pin, least recently pinned first; then tool waits, the one expected back last first
        (ties: the order they were released in, a session's last block first).  Lazy: sorted when
        first asked; valid while one allocation runs (it frees nothing)."""
        def rank(block_id: int) -> tuple[int, float]:
            pins = self.pins[block_id].values()
            if not any(p.waiting_on_tool for p in pins):
                return (0, max(p.since for p in pins))
            return (1, -max(p.deadline for p in pins))
        yield from sorted(self.retained, key=rank)

    def _unkey(self, key: str, block_id: int) -> None:
        """``block_id`` was evicted: it leaves ``key``'s pinned set (the key keeps its other blocks)."""
        held = self.pinned_by_key.get(key)
        if held is not None:
            held.discard(block_id)

    def _release(self, block_id: int, evict_first: bool = False) -> None:
        """A block nobody holds any more: retained while pinned, else into the free queue."""
        if block_id in self.pins:
            self.retained[block_id] = None
            return
        self.free_queue[block_id] = None
        if evict_first:
            self.free_queue.move_to_end(block_id, last=False)

    def _take_free(self, block_id: int) -> None:
        """Take a free block out of the free queue or ``retained`` (a prefix-cache hit)."""
        if block_id in self.retained:
            del self.retained[block_id]
        else:
            del self.free_queue[block_id]
        self._expired.discard(block_id)

    def check_invariants(self, requests: Iterable[Request]) -> None:
        """Assert the pool is consistent with the block tables of ``requests``.

        Raises:
            AssertionError: free + used != pool, a wrong ref count, or a block
                shared by two requests other than as the same cached prefix block.
        """
        holders: dict[int, list[tuple[Request, int]]] = {}
        for req in requests:
            assert len(set(req.block_ids)) == len(req.block_ids), f"{req.request_id} holds a block twice"
            for idx, block_id in enumerate(req.block_ids):
                holders.setdefault(block_id, []).append((req, idx))
        used = [b for b in self.blocks if b.ref_cnt > 0]
        assert len(used) + self.num_free_blocks == self.num_blocks, "free + used != pool"
        assert not set(self.retained) & set(self.free_queue), "a block both retained and in the free queue"
        for block_id in self.retained:
            assert block_id in self.pins, f"block {block_id}: retained without a pin"
        for key, pinned in self.pinned_by_key.items():
            assert key in self.key_pins, f"pin key {key!r}: blocks without a pin"
            for block_id in pinned:
                assert self.pins.get(block_id, {}).get(key) is self.key_pins[key], \
                    f"block {block_id}: pin of {key!r} not recorded"
        for block in self.blocks:
            held = holders.get(block.block_id, [])
            assert block.ref_cnt == len(held), f"block {block.block_id}: ref {block.ref_cnt} != holders {len(held)}"
            assert (block.ref_cnt == 0) == (block.block_id in self.free_queue or block.block_id in self.retained)
            if len(held) > 1:
                assert block.block_hash is not None, f"block {block.block_id} shared but not a cached prefix"
                for req, idx in held:
                    assert req.block_hashes[idx] == block.block_hash, f"block {block.block_id} shared off-prefix"
        for block_hash, block_id in self.cached.items():
            assert self.blocks[block_id].block_hash == block_hash
        for (parent, first), block_ids in self.children.items():
            for block_id in block_ids:
                block = self.blocks[block_id]
                assert block.block_hash is not None and self.cached.get(block.block_hash) == block_id, \
                    f"block {block_id}: a children entry for a block not cached"
                assert block.parent_hash == parent and block.token_ids[:1] == (first,), \
                    f"block {block_id}: children entry stale"
        for (parent, first), block_ids in self.tails.items():
            for block_id in block_ids:
                block = self.blocks[block_id]
                assert block.ref_cnt == 0, f"block {block_id}: a registered partial block is held"
                assert block.tail_parent == parent and block.tail_tokens[:1] == (first,), \
                    f"block {block_id}: tail entry stale"

    # -- internals ---------------------------------------------------------

    def _register_tail(self, request: Request) -> None:
        """Register the computed tokens of ``request``'s partial last block (it is being freed)."""
        bs = self.block_size
        num_full, k = divmod(request.num_computed_tokens, bs)
        if not k or num_full >= len(request.block_ids):
            return
        block = self.blocks[request.block_ids[num_full]]
        if block.ref_cnt != 1 or block.block_hash is not None or block.block_id in self._unwritten:
            return
        self._update_hashes(request)
        if num_full > len(request.block_hashes):
            return
        self._drop_tail(block)
        block.tail_parent = request.block_hashes[num_full - 1] if num_full else _root(request)
        block.tail_tokens = tuple(request.all_token_ids[num_full * bs:num_full * bs + k])
        self.tails.setdefault((block.tail_parent, block.tail_tokens[0]), set()).add(block.block_id)

    def _drop_tail(self, block: KVBlock) -> None:
        """Forget ``block``'s partial-block registration, if any."""
        if block.tail_parent is None:
            return
        _unindex(self.tails, (block.tail_parent, block.tail_tokens[0]), block.block_id)
        block.tail_parent = None
        block.tail_tokens = ()

    def _pop_free_block(self, victims: Iterator[int]) -> int:
        """Evict: the free queue's head, else (the pool would stall) the next of ``victims``
        (``_victims``)."""
        pinned = not self.free_queue
        if not pinned:
            block_id, _ = self.free_queue.popitem(last=False)
        else:
            block_id = next(victims)
            del self.retained[block_id]
            for key in self.pins.pop(block_id):
                self._unkey(key, block_id)
        cause = "expired" if block_id in self._expired else "evicted"
        self._expired.discard(block_id)
        block = self.blocks[block_id]
        if self.tier is not None and block.tier_key is not None and block.block_hash is not None \
                and block.tier_key not in self.tier:
            self.blocks_to_save.append((block_id, block.tier_key))  # a cached block: to disk, not dropped
        self._drop_tail(block)
        if block.block_hash is not None:
            self.evicted[block.block_hash] = cause
            self.evicted.move_to_end(block.block_hash)
            if len(self.evicted) > 4 * self.num_blocks:
                self.evicted.popitem(last=False)
            self._drop_hash(block)
        self._unwritten.discard(block_id)
        block.ref_cnt = 1
        return block_id

    def _drop_hash(self, block: KVBlock) -> None:
        """Make ``block`` unhittable: out of ``cached`` and ``children``, no hash, no tokens."""
        if block.block_hash is not None and self.cached.get(block.block_hash) == block.block_id:
            del self.cached[block.block_hash]
        if block.parent_hash is not None:
            _unindex(self.children, (block.parent_hash, block.token_ids[0]), block.block_id)
        block.block_hash = None
        block.parent_hash = None
        block.token_ids = ()
        block.tier_key = None

    def _update_hashes(self, request: Request) -> None:
        bs = self.block_size
        hashes = request.block_hashes
        tokens = request.all_token_ids
        first_parent = None if request.sampling_params.cache_salt is None else _root(request)
        for i in range(len(hashes), len(tokens) // bs):
            hashes.append(hash_block(hashes[-1] if hashes else first_parent, tokens[i * bs:(i + 1) * bs]))

    def _register_full_blocks(self, request: Request, num_tokens: int) -> None:
        num_full = min(num_tokens, request.num_tokens) // self.block_size
        start = self._num_registered.get(request.request_id, 0)
        if num_full <= start:
            return
        self._update_hashes(request)
        bs = self.block_size
        for i in range(start, num_full):
            block = self.blocks[request.block_ids[i]]
            block_hash = request.block_hashes[i]
            if block.block_hash is None and block_hash not in self.cached:
                block.block_hash = block_hash
                block.token_ids = tuple(request.all_token_ids[i * bs:(i + 1) * bs])
                block.parent_hash = request.block_hashes[i - 1] if i else _root(request)
                if self.tier is not None:
                    block.tier_key = self._tier_keys(request)[i]
                self.cached[block_hash] = block.block_id
                self.children.setdefault((block.parent_hash, block.token_ids[0]), set()).add(block.block_id)
                self._uncommitted.append(block.block_id)
        self._num_registered[request.request_id] = num_full

    def _same_tokens(self, request: Request, index: int, block_id: int) -> bool:
        bs = self.block_size
        return self.blocks[block_id].token_ids == tuple(request.all_token_ids[index * bs:(index + 1) * bs])
