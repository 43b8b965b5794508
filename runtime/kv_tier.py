"""A second KV tier on disk: cached blocks that must leave the pool, and every pinned block at shutdown.

The pool (``loom.runtime.kv_cache_manager``) evicts a block when nothing else
is free; a cached block, a session's pinned one (``loom.runtime.kv_retention``)
or any other full block the prefix cache holds, would then be recomputed on its
next use, and every block is lost when the process stops.  With a tier, an
evicted full block's K and V (every layer) are written to a file first (as a
hierarchical cache writes back: SGLang's HiCache, vLLM's KV offloading), and a
later prefix miss on the same tokens loads the file
into a fresh block instead of recomputing it; after ``loom serve`` restarts on
the same tier folder a session's next turn reads its KV from disk.  Loading a
block reads ``kv_bytes_per_block`` bytes (SmolLM2-135M in float32: 720 KiB,
about 0.2 ms from the page cache) where recomputing its 16 tokens runs the
whole model over them.

Keys are stable across processes: a block's key is a BLAKE2b digest chained
from the model's fingerprint, the request's ``cache_salt`` and every token of
the prefix up to and including the block (:func:`chain_keys`), so a tenant's
salted blocks are found only by requests with the same salt, and another
model, other weights, dtype, block size or KV layout never match.  Each file
holds a 64-byte header (magic, fingerprint, tensor shape and dtype, XXH3-64 of
the payload) and the payload; a file whose header or checksum does not match is
deleted and counted ``corrupt``, and its tokens are recomputed, never served.
The checksum guards against torn or damaged files, not against a writer (the
keys already name the exact tokens, and only the server writes the folder), so
it is XXH3-64 (the ``xxhash`` library: 2-6 ms over 39 MiB here) rather than CRC-32
(``zlib``: 14-20 ms) or BLAKE2b (58 ms): a session's first turn after a restart reads
and verifies every block it resumes.
A block is returned as a private memory map of its file (the payload 64-byte
aligned): reading it maps the page cache's pages as they are, where reading the
file into fresh memory faulted in and zeroed every page first.  For a resumed
session's 54 blocks (39 MiB, in the page cache) read, verify and copy into the
pool took 7-11 ms against 41 ms (``readinto`` and CRC-32).  ``MAP_POPULATE`` was
slower (20 ms: it breaks copy-on-write for every page of a writable mapping).

The folder has a size budget (``max_bytes``): the least recently used files
go first.  Files are written atomically (a temporary name, then ``rename``),
so a crash leaves either the whole file or none.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import mmap
import os
import struct
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import torch
import xxhash

logger = logging.getLogger(__name__)

_MAGIC = b"LOOMKV03"  # 02 (CRC-32), 01 (BLAKE2b): a mismatch, dropped and recomputed like a corrupt file
_DTYPES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
# magic, fingerprint, payload XXH3-64, dtype code, shape (6 dims max), padding to 64 bytes (the payload's alignment)
_HEADER = struct.Struct("<8s16sQB6I7x")


def chain_keys(fingerprint: str, salt: str | None, token_ids: Sequence[int], block_size: int,
               start: int = 0, prev: bytes | None = None) -> list[bytes]:
    """Stable keys (16-byte BLAKE2b digests) of the full blocks ``start..`` of ``token_ids``.

    ``prev`` is the key of block ``start - 1`` (``None`` when ``start`` is 0).
    """
    keys: list[bytes] = []
    if prev is None:
        prev = hashlib.blake2b(f"{fingerprint}\x00{salt or ''}".encode(), digest_size=16).digest()
    for i in range(start, len(token_ids) // block_size):
        block = token_ids[i * block_size:(i + 1) * block_size]
        prev = hashlib.blake2b(prev + struct.pack(f"<{block_size}q", *block), digest_size=16).digest()
        keys.append(prev)
    return keys


class DiskKVTier:
    """KV blocks in files under ``folder / fingerprint``, at most ``max_bytes`` of them.

    Args:
        folder: the tier's root folder (created).
        fingerprint: the model's identity (weights, dtype, block size, KV layout); files of
            another fingerprint live in another subfolder and are never read.
        max_bytes: size budget of this fingerprint's files (bytes).

    Counters (``stats``): ``kv_tier_blocks``, ``kv_tier_bytes``, ``kv_tier_writes``,
    ``kv_tier_reads``, ``kv_tier_corrupt``.
    """

    def __init__(self, folder: str | Path, fingerprint: str, max_bytes: int) -> None:
        if max_bytes <= 0:
            raise ValueError("kv_tier_bytes: must be a positive number of bytes")
        self.fingerprint = fingerprint
        self._fp = hashlib.blake2b(fingerprint.encode(), digest_size=16).digest()
        self.folder = Path(folder) / self._fp.hex()
        self.folder.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.index: OrderedDict[bytes, int] = OrderedDict()  # key -> file bytes, least recently used first
        files = sorted(self.folder.glob("*.kv"), key=lambda p: p.stat().st_mtime)
        for path in files:
            try:
                self.index[bytes.fromhex(path.stem)] = path.stat().st_size
            except (ValueError, OSError):
                continue
        self.bytes = sum(self.index.values())
        self.writes = self.reads = self.corrupt = 0
        self._evict()

    def _path(self, key: bytes) -> Path:
        return self.folder / f"{key.hex()}.kv"

    def __contains__(self, key: bytes) -> bool:
        return key in self.index

    def put(self, key: bytes, kv: torch.Tensor) -> None:
        """Store one block's K and V (``kv``: any shape of at most 6 dims, float32 / bfloat16 / float16,
        on any device).  An existing entry is kept (same key: same tokens, same KV)."""
        if key in self.index:
            self.index.move_to_end(key)
            return
        payload = kv.detach().to("cpu").contiguous().view(torch.uint8).reshape(-1).numpy().data
        shape = list(kv.shape) + [0] * (6 - kv.dim())
        header = _HEADER.pack(_MAGIC, self._fp, xxhash.xxh3_64_intdigest(payload), _DTYPES[kv.dtype], *shape)
        path = self._path(key)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        try:
            with open(tmp, "wb") as f:
                f.write(header)
                f.write(payload)
            tmp.replace(path)
        except OSError as exc:  # a full or read-only disk: the block is recomputed when needed
            logger.warning("KV tier: could not write a block (%s)", exc)
            tmp.unlink(missing_ok=True)
            return
        size = len(header) + len(payload)
        self.index[key] = size
        self.bytes += size
        self.writes += 1
        self._evict()

    def get(self, key: bytes) -> torch.Tensor | None:
        """The block stored under ``key``, verified; ``None`` when absent or corrupt (then deleted)."""
        run = self.get_run([key])
        return run[0] if run else None

    def get_run(self, keys: Sequence[bytes]) -> list[torch.Tensor]:
        """The blocks of ``keys`` from the first on, as far as the tier holds them in a row and they verify
        (a corrupt one is deleted and ends the run), one after another: two reader threads took 27 ms for a
        resumed session's 54 blocks (40 MiB) where one took 16, their fresh pages' faults contending."""
        blocks: list[torch.Tensor] = []
        for key in itertools.takewhile(self.index.__contains__, keys):
            kv = self._read(key)
            if kv is None:
                self.corrupt += 1
                self._drop(key)
                break
            self.index.move_to_end(key)
            self.reads += 1
            blocks.append(kv)
        return blocks

    def _read(self, key: bytes) -> torch.Tensor | None:
        """One file mapped as the tensor returned (private: a write would copy the page, never touch the file),
        verified; ``None`` when it does not verify."""
        try:
            with open(self._path(key), "rb") as f:
                size = os.fstat(f.fileno()).st_size
                mapped = mmap.mmap(f.fileno(), size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
            data = torch.frombuffer(mapped, dtype=torch.uint8)
            raw = memoryview(mapped)
            magic, fp, digest, code, *dims = _HEADER.unpack_from(raw)
            dtype = next(d for d, c in _DTYPES.items() if c == code)
            shape = [d for d in dims if d]
            payload = raw[_HEADER.size:]
            ok = magic == _MAGIC and fp == self._fp and \
                len(payload) == torch.Size(shape).numel() * torch.empty(0, dtype=dtype).element_size() and \
                xxhash.xxh3_64_intdigest(payload) == digest
        except (OSError, ValueError, struct.error, StopIteration, RuntimeError):
            ok = False
        return data[_HEADER.size:].view(dtype).view(shape) if ok else None

    def _drop(self, key: bytes) -> None:
        self.bytes -= self.index.pop(key, 0)
        self._path(key).unlink(missing_ok=True)

    def _evict(self) -> None:
        while self.bytes > self.max_bytes and self.index:
            self._drop(next(iter(self.index)))

    def stats(self) -> dict[str, int]:
        """Blocks and bytes held; writes, reads and corrupt entries seen by this process."""
        return {"kv_tier_blocks": len(self.index), "kv_tier_bytes": self.bytes, "kv_tier_writes": self.writes,
                "kv_tier_reads": self.reads, "kv_tier_corrupt": self.corrupt}


def model_fingerprint(model_path: str | Path, config: object, dtype: torch.dtype, hf_config: object) -> str:
    """What must match for a stored block to be valid: the weights (each weight file's name, size and
    modification time), the quantization, the KV dtype, block size and layout (layers, KV heads, head dim)."""
    path = Path(model_path)
    files = sorted(p for p in path.glob("*") if p.suffix in (".safetensors", ".bin", ".gguf", ".pt"))
    weights = [(p.name, p.stat().st_size, int(p.stat().st_mtime)) for p in files]
    layout = [getattr(hf_config, name, None) for name in ("num_hidden_layers", "num_key_value_heads",
                                                          "num_attention_heads", "head_dim", "hidden_size")]
    return repr((str(path.resolve()), weights, getattr(config, "quantization", None),
                 getattr(config, "quantization_group_size", None), str(dtype), getattr(config, "block_size", None),
                 layout))
