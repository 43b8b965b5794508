"""``loom.runtime.host_memory``: a model's weights moved into one huge-page arena keep their values, sharing
and layout, and the arena is marked for transparent huge pages (the kernel's ``hg`` flag on its mapping);
``zeros`` (the KV pool's memory) is zero and resident only where written."""

from __future__ import annotations

import ctypes
import sys

import pytest
import torch
from torch import nn

from loom.runtime.host_memory import ALIGN, HUGE_PAGE, enabled, release_free_memory, use_huge_pages, zeros

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="huge pages are Linux-only")


@pytest.fixture(autouse=True)
def _huge_pages_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """On, as for a user: the suite turns them off elsewhere (tests/conftest.py)."""
    monkeypatch.setenv("LOOM_HUGE_PAGES", "1")
    assert enabled()


class _TiedModel(nn.Module):
    """An embedding and a head sharing one weight, a biased projection and a small buffer (~9 MiB)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(4096, 256)
        self.proj = nn.Linear(256, 1024)
        self.head = nn.Linear(256, 4096, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("codes", torch.randint(0, 255, (3000,), dtype=torch.uint8))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        return self.head(h) + self.proj(h).sum(-1, keepdim=True) + self.codes[:1].float()


def _vm_flags(address: int) -> str:
    """The ``VmFlags`` line of the mapping of this process that holds ``address``."""
    current = None
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                current = lo <= address < hi
            elif current and line.startswith("VmFlags:"):
                return line
    raise AssertionError(f"no mapping holds {address:#x}")


def test_moved_weights_compute_the_same_stay_tied_and_sit_aligned_in_one_marked_arena():
    torch.manual_seed(0)
    model = _TiedModel().eval()
    ids = torch.randint(0, 4096, (2, 7))
    with torch.no_grad():
        before = model(ids)
    old = model.embed.weight.data_ptr()
    assert use_huge_pages(model) >= HUGE_PAGE
    with torch.no_grad():
        assert torch.equal(model(ids), before)  # same values, bit for bit
    assert model.head.weight is model.embed.weight and model.embed.weight.data_ptr() != old
    tensors = [model.embed.weight, model.proj.weight, model.proj.bias, model.codes]
    assert all(t.data_ptr() % ALIGN == 0 for t in tensors)
    assert len({t.untyped_storage().data_ptr() for t in tensors}) == 1  # one arena
    assert isinstance(model.proj.weight, nn.Parameter) and not model.proj.weight.requires_grad
    assert " hg" in _vm_flags(model.embed.weight.data_ptr())  # madvise(MADV_HUGEPAGE) reached the mapping


def test_loom_huge_pages_0_leaves_every_tensor_where_it_was(monkeypatch):
    monkeypatch.setenv("LOOM_HUGE_PAGES", "0")
    model = _TiedModel()
    ptrs = [p.data_ptr() for p in model.parameters()]
    assert use_huge_pages(model) == 0
    assert [p.data_ptr() for p in model.parameters()] == ptrs


def test_a_model_under_one_huge_page_is_not_moved():
    model = nn.Linear(16, 16)
    ptr = model.weight.data_ptr()
    assert use_huge_pages(model) == 0 and model.weight.data_ptr() == ptr
    release_free_memory()  # callable anywhere (a no-op off glibc)


def _resident_pages(t: torch.Tensor) -> int:
    """How many of the 4 KiB pages under ``t`` are resident (``mincore``: exact for this range, where smaps
    would count a whole mapping, which the kernel may have merged with a neighbouring one)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
    page = 4096
    start = t.data_ptr() - t.data_ptr() % page
    length = t.data_ptr() + t.numel() * t.element_size() - start
    pages = -(-length // page)
    vec = (ctypes.c_ubyte * pages)()
    assert libc.mincore(ctypes.c_void_p(start), ctypes.c_size_t(length), vec) == 0, ctypes.get_errno()
    return sum(v & 1 for v in vec)


def test_zeros_are_zero_and_only_the_pages_written_become_resident():
    kv = zeros((2, 3, 4096, 2, 64), torch.float32)  # 12 MiB, the shape of a small KV pool
    assert kv.shape == (2, 3, 4096, 2, 64) and kv.dtype == torch.float32 and kv.is_contiguous()
    assert _resident_pages(kv) == 0
    kv[1, 2, :16] = 1.0  # one block of 16 slots: 8 KiB
    assert 2 <= _resident_pages(kv) <= 2 * HUGE_PAGE // 4096  # 2 pages; at most two 2 MiB ones where THP is always
    assert torch.equal(kv[0], torch.zeros_like(kv[0])) and torch.equal(kv[1, :2], torch.zeros_like(kv[1, :2]))
    assert kv.sum().item() == 16 * 2 * 64
    with pytest.raises(ValueError, match="no elements"):
        zeros((0, 8), torch.float32)
