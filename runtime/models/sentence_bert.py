"""A Sentence-BERT encoder (BERT, mean pooling, L2 normalisation) run directly in torch.

Sentence-BERT (Reimers & Gurevych 2019) embeds a text as the mean of a BERT encoder's last hidden
states over its tokens, normalised to unit length; all-MiniLM-L6-v2, Loom's bundled embedder, is one
(6 layers, hidden 384, 12 heads, a 256-token window).  sentence-transformers runs such a model
through transformers' modeling stack, and importing the two (``sentence_transformers`` pulls in
``transformers.modeling_utils``, ``torch._dynamo``, ``torch.distributed.tensor``, scikit-learn and
SciPy) costs about 7 s of CPU per process on a 2-core AVX2 machine, against 2.5 s for torch alone:
more than the embedding work of a ``loom search``, ``loom ingest`` of a page, or a chat's first
question.  This module runs the same arithmetic with torch, ``safetensors`` and the checkpoint's
own Hugging Face tokenizer, and nothing else.

:func:`load_sentence_bert` takes a sentence-transformers folder whose ``modules.json`` is exactly
Transformer, Pooling (mean tokens only) and Normalize, over a ``config.json`` of ``model_type``
``bert`` with absolute positions and the ``gelu`` activation; for any other folder it returns
``None`` and the caller uses sentence-transformers.  Its vectors equal sentence-transformers' within
float32 rounding (``tests/runtime/test_sentence_bert.py`` compares them on real documentation text).
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

logger = logging.getLogger(__name__)
_MODULES = ["sentence_transformers.models.Transformer", "sentence_transformers.models.Pooling",
            "sentence_transformers.models.Normalize"]


def load_sentence_encoder(path: str, device: str | None = "cpu") -> Any:
    """The sentence encoder at ``path`` (a folder, or a sentence-transformers name in the local Hugging Face
    cache) on ``device`` (``None``: CUDA when a GPU is visible, else CPU): a :class:`SentenceBert` when the
    folder is a plain Sentence-BERT one (:func:`load_sentence_bert`), else a
    ``sentence_transformers.SentenceTransformer``.  Both offer ``tokenizer``, ``max_seq_length``,
    ``get_sentence_embedding_dimension()`` and ``encode``.

    Raises:
        OSError, ValueError: as sentence-transformers, for a model that cannot be loaded.
    """
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    logger.info("loading embedder %s on %s", path, device)
    native = load_sentence_bert(path, device) if os.path.isdir(path) else None
    if native is not None:
        return native
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(path, device=device)


def _read(path: Path) -> Any:
    return json.loads(path.read_text()) if path.is_file() else None


def load_sentence_bert(folder: str | Path, device: str = "cpu") -> "SentenceBert | None":
    """The encoder of the sentence-transformers ``folder``, or ``None`` when its modules, pooling or
    architecture are not the plain Sentence-BERT ones this module runs (see the module docstring).

    Raises:
        OSError: the folder's weights or tokenizer cannot be read.
        ValueError: one of its JSON files is malformed.
    """
    root = Path(folder)
    modules = _read(root / "modules.json")
    config = _read(root / "config.json")
    types = [m.get("type") if isinstance(m, dict) else m for m in modules] if isinstance(modules, list) else None
    if types != _MODULES or not isinstance(config, dict):
        return None
    pooling = _read(root / modules[1].get("path", "") / "config.json") or {}
    modes = {k for k, v in pooling.items() if k.startswith("pooling_mode_") and v}
    if (modes != {"pooling_mode_mean_tokens"} or config.get("model_type") != "bert"
            or config.get("position_embedding_type", "absolute") != "absolute" or config.get("hidden_act") != "gelu"):
        return None
    settings = _read(root / "sentence_bert_config.json") or {}
    return SentenceBert(root, config, int(settings.get("max_seq_length") or config["max_position_embeddings"]),
                        torch.device(device), lower_case=bool(settings.get("do_lower_case", False)))


class SentenceBert:
    """A BERT encoder with mean pooling and L2 normalisation (see the module docstring).

    Offers the part of ``sentence_transformers.SentenceTransformer``'s interface Loom uses:
    ``tokenizer``, ``max_seq_length``, ``get_sentence_embedding_dimension()`` and ``encode``.

    Args:
        root: the model folder (``model.safetensors``, the tokenizer files).
        config: its ``config.json``.
        max_seq_length: tokens read per text, ``[CLS]`` and ``[SEP]`` included; longer texts are truncated.
        device: where the weights live and the forward pass runs.
        lower_case: lower-case each text before tokenizing (``sentence_bert_config.json``'s ``do_lower_case``,
            which sentence-transformers applies on top of the tokenizer's own setting).
    """

    def __init__(self, root: Path, config: dict[str, Any], max_seq_length: int, device: torch.device,
                 lower_case: bool = False) -> None:
        from safetensors.torch import load_file
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(root))
        self.max_seq_length = max_seq_length
        self.heads = int(config["num_attention_heads"])
        self.layers = int(config["num_hidden_layers"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.hidden = int(config["hidden_size"])
        weights = load_file(str(root / "model.safetensors"), device=str(device))
        prefix = "bert." if "bert.embeddings.word_embeddings.weight" in weights else ""
        self.w = {k[len(prefix):]: v.float() for k, v in weights.items() if k.startswith(prefix)}
        self.device = device
        self.lower_case = lower_case
        self._lock = threading.Lock()  # encode may be called from worker threads

    def get_sentence_embedding_dimension(self) -> int:
        """Length of each vector (384 for all-MiniLM-L6-v2)."""
        return self.hidden

    def _norm(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return F.layer_norm(x, (self.hidden,), self.w[f"{name}.weight"], self.w[f"{name}.bias"], self.eps)

    def _linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return F.linear(x, self.w[f"{name}.weight"], self.w[f"{name}.bias"])

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Unit-length embeddings ``float32 [B, hidden]`` of a padded batch (``input_ids`` and
        ``attention_mask``: ``int64 [B, T]``, mask 1 on real tokens)."""
        w = self.w
        b, t = input_ids.shape
        x = (w["embeddings.word_embeddings.weight"][input_ids] + w["embeddings.position_embeddings.weight"][:t]
             + w["embeddings.token_type_embeddings.weight"][0])
        x = self._norm(x, "embeddings.LayerNorm")
        keep = attention_mask.bool()
        bias = torch.zeros(b, 1, 1, t, device=x.device).masked_fill(~keep[:, None, None, :], -math.inf)
        d = self.hidden // self.heads
        for i in range(self.layers):
            p = f"encoder.layer.{i}"

            def heads(y: torch.Tensor) -> torch.Tensor:
                return y.view(b, t, self.heads, d).transpose(1, 2)

            q, k, v = (heads(self._linear(x, f"{p}.attention.self.{n}")) for n in ("query", "key", "value"))
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=bias).transpose(1, 2).reshape(b, t, self.hidden)
            x = self._norm(self._linear(ctx, f"{p}.attention.output.dense") + x, f"{p}.attention.output.LayerNorm")
            h = F.gelu(self._linear(x, f"{p}.intermediate.dense"))
            x = self._norm(self._linear(h, f"{p}.output.dense") + x, f"{p}.output.LayerNorm")
        m = attention_mask.unsqueeze(-1).to(x.dtype)
        pooled = (x * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return F.normalize(pooled, p=2, dim=1)

    def encode(self, texts: list[str], batch_size: int = 64, show_progress_bar: bool = False,
               convert_to_numpy: bool = True, normalize_embeddings: bool = True) -> np.ndarray:
        """Embed ``texts`` -> ``float32 [len(texts), hidden]``, unit rows, in their order.

        Each text is stripped of surrounding whitespace (and lower-cased where the model's config says
        so), and texts are batched longest first (both as
        sentence-transformers does; a batch then pads little).  ``show_progress_bar`` draws a tqdm bar
        over the batches.  ``convert_to_numpy`` and ``normalize_embeddings`` are accepted for
        sentence-transformers' signature: the result is always a normalised numpy array.
        """
        texts = [t.strip().lower() if self.lower_case else t.strip() for t in texts]
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = np.zeros((len(texts), self.hidden), dtype=np.float32)
        starts = range(0, len(texts), batch_size)
        if show_progress_bar:
            from tqdm.auto import tqdm

            starts = tqdm(starts, desc="Batches")
        with self._lock:
            for s in starts:
                rows = order[s:s + batch_size]
                enc = self.tokenizer([texts[i] for i in rows], padding=True, truncation="longest_first",
                                     max_length=self.max_seq_length, return_tensors="pt")
                vecs = self.forward(enc["input_ids"].to(self.device), enc["attention_mask"].to(self.device))
                out[rows] = vecs.float().cpu().numpy()
        return out
