"""One Llama-family decoder for Llama, Qwen2, Qwen3 and Mistral checkpoints.

The family differs in a few switches read from the Hugging Face config:
Qwen2 has q/k/v biases, Qwen3 RMS-normalises q and k per head before RoPE,
Mistral (and Qwen2/3 with ``use_sliding_window``) uses sliding-window
attention, Llama 3 scales RoPE frequencies (``rope_type: llama3``, computed by
transformers' own ``ROPE_INIT_FUNCTIONS``).  Numerics follow transformers'
implementation op for op (RMSNorm in float32, rotate-half RoPE) so float32
greedy output equals ``model.generate``.

A quantized model on CPU runs the same layers through :mod:`.fused_forward`
(fused kernels between the matmuls), which quantization installs as the model's
``fused_path``.  Inputs are flattened over the batch (``[T]`` token ids and positions), as in
vLLM and nano-vllm; q/k/v and gate/up projections are fused into one matmul
each (``qkv_proj``, ``gate_up_proj``); ``packed_modules_mapping`` tells the
loader how HF's separate tensors fill them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Protocol, cast

import torch
from torch import nn

from loom.json_types import JSONObject
from loom.runtime.attention import AttentionMetadata, PagedAttention

if TYPE_CHECKING:
    from transformers import PretrainedConfig

class RMSNorm(nn.Module):
    """Root-mean-square norm (Zhang & Sennrich 2019), computed in float32 as transformers does."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:  # the same arithmetic, without two no-op casts (a decode step has 61 norms)
            return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


class RotaryEmbedding(nn.Module):
    """Rotary position embedding (Su et al. 2021), cos/sin tables precomputed per position."""

    def __init__(self, config: PretrainedConfig, head_dim: int, max_positions: int) -> None:
        super().__init__()
        params: JSONObject = dict(getattr(config, "rope_parameters", None) or {})
        rope_type: str = params["rope_type"] if "rope_type" in params else params.get("type", "default")
        # real tables on the CPU even while the model is built on the meta device (every load builds it there)
        with torch.device("cpu"):
            if rope_type == "default":
                base = params.get("rope_theta", getattr(config, "rope_theta", 10000.0))
                inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim))
                scaling = 1.0
            else:
                from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

                inv_freq, scaling = ROPE_INIT_FUNCTIONS[rope_type](config, torch.device("cpu"))
            freqs = torch.arange(max_positions, dtype=torch.float)[:, None] * inv_freq[None, :]
            emb = torch.cat((freqs, freqs), dim=-1)
        # Plain attributes, not buffers: ``model.to(bfloat16)`` must not round them.
        self.cos = emb.cos() * scaling
        self.sin = emb.sin() * scaling

    def move_to(self, device: torch.device) -> None:
        """Move the float32 cos/sin tables to ``device``."""
        self.cos, self.sin = self.cos.to(device), self.sin.to(device)

    def lookup(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cos, sin)``, each ``[T, 1, D]`` in ``dtype``, for positions ``[T]``: once per forward, shared by
        every layer."""
        return self.cos[positions].unsqueeze(1).to(dtype), self.sin[positions].unsqueeze(1).to(dtype)

    @staticmethod
    def rotate(x: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """Rotate ``x`` ``[T, H, D]`` (q and k heads side by side: the same arithmetic per element)."""
        cos, sin = cos_sin
        return x * cos + _rotate_half(x) * sin


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaAttention(nn.Module):
    def __init__(self, config: PretrainedConfig, layer_idx: int, rope: RotaryEmbedding) -> None:
        super().__init__()
        self.num_heads: int = config.num_attention_heads
        self.num_kv_heads: int = getattr(config, "num_key_value_heads", None) or self.num_heads
        self.head_dim: int = getattr(config, "head_dim", None) or config.hidden_size // self.num_heads
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        model_type = getattr(config, "model_type", "llama")
        attention_bias = bool(getattr(config, "attention_bias", False))
        qkv_bias = attention_bias or model_type == "qwen2"
        # nn.Module: tensor parallelism swaps in its own layers (runtime.distributed.shard)
        self.qkv_proj: nn.Module = nn.Linear(config.hidden_size, self.q_size + 2 * self.kv_size, bias=qkv_bias)
        self.o_proj: nn.Module = nn.Linear(self.q_size, config.hidden_size, bias=attention_bias and model_type != "qwen2")
        self.qk_norm = model_type == "qwen3"
        if self.qk_norm:
            self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
            self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
        self.rope = rope
        self.attn = PagedAttention(
            self.num_heads, self.num_kv_heads, self.head_dim, self.head_dim**-0.5, _sliding_window(config, layer_idx)
        )

    def forward(self, rope: tuple[torch.Tensor, torch.Tensor], x: torch.Tensor, meta: AttentionMetadata
                ) -> torch.Tensor:
        """``x [T, hidden]`` -> ``[T, hidden]``; ``rope`` is :meth:`RotaryEmbedding.lookup` of the step's positions."""
        t = x.shape[0]
        qkv = self.qkv_proj(x)
        v = qkv[:, self.q_size + self.kv_size:].contiguous().view(t, self.num_kv_heads, self.head_dim)
        if self.qk_norm:
            q, k = qkv[:, :self.q_size + self.kv_size].split([self.q_size, self.kv_size], dim=-1)
            q = self.rope.rotate(self.q_norm(q.view(t, self.num_heads, self.head_dim)), rope)
            k = self.rope.rotate(self.k_norm(k.view(t, self.num_kv_heads, self.head_dim)), rope)
        else:  # q and k heads rotated in one pass
            qk = self.rope.rotate(qkv[:, :self.q_size + self.kv_size].view(t, -1, self.head_dim), rope)
            q, k = qk[:, :self.num_heads], qk[:, self.num_heads:]
        return self.o_proj(self.attn(q, k, v, meta))


# ``config.hidden_act`` -> the gated MLP's activation, as transformers' ``ACT2FN`` maps these names (importing
# that module pulls in torch.distributed.tensor: 0.9 s at every process start).
ACTIVATIONS: dict[str, nn.Module] = {"silu": nn.SiLU(), "swish": nn.SiLU(), "relu": nn.ReLU(), "gelu": nn.GELU(),
                                     "gelu_pytorch_tanh": nn.GELU(approximate="tanh")}


def activation(name: str) -> nn.Module:
    """The module for ``config.hidden_act``; raises ``ValueError`` naming the field for another name."""
    if name not in ACTIVATIONS:
        raise ValueError(f"hidden_act: {name!r} is not supported (supported: {', '.join(ACTIVATIONS)})")
    return ACTIVATIONS[name]


class LlamaMLP(nn.Module):
    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__()
        bias = bool(getattr(config, "mlp_bias", False))
        self.intermediate_size: int = config.intermediate_size
        self.gate_up_proj: nn.Module = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=bias)
        self.down_proj: nn.Module = nn.Linear(config.intermediate_size, config.hidden_size, bias=bias)
        self.act = activation(config.hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).split(self.intermediate_size, dim=-1)
        return self.down_proj(self.act(gate) * up)


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config: PretrainedConfig, layer_idx: int, rope: RotaryEmbedding) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = LlamaAttention(config, layer_idx, rope)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = LlamaMLP(config)

    def forward(self, rope: tuple[torch.Tensor, torch.Tensor], h: torch.Tensor, meta: AttentionMetadata
                ) -> torch.Tensor:
        h = h + self.self_attn(rope, self.input_layernorm(h), meta)
        return h + self.mlp(self.post_attention_layernorm(h))


class FusedPath(Protocol):
    """A forward of the decoder stack other than the eager layers' (:mod:`.fused_forward`)."""

    def supported(self, model: LlamaModel) -> bool:
        """Whether it can run ``model`` (checked once, at the first forward)."""
        ...

    def forward(self, model: LlamaModel, h: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata
                ) -> torch.Tensor:
        """``h [T, hidden]`` token embeddings -> ``[T, hidden]`` after the final norm."""
        ...


class LlamaModel(nn.Module):
    def __init__(self, config: PretrainedConfig, max_positions: int) -> None:
        super().__init__()
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        rope = RotaryEmbedding(config, head_dim, max_positions)
        self.rope = rope
        # no random init (every load fills the weights); a plain Embedding's init under ``torch.device("meta")``
        # imports torch._dynamo, 0.5 s at every process start
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size,
                                         _weight=torch.empty(config.vocab_size, config.hidden_size))
        self.layers = nn.ModuleList(LlamaDecoderLayer(config, i, rope) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.fused_path: FusedPath | None = None
        """Another forward for these layers, installed by whatever swapped them (quantization installs
        :mod:`.fused_forward`'s); ``None``: the eager layers only."""
        self.fused: bool | None = None
        """Whether forward takes ``fused_path``: decided at the first forward (``None`` until then) by
        ``fused_path.supported``; settable to ``False`` to keep the eager path."""

    @property
    def decoder_layers(self) -> list[LlamaDecoderLayer]:
        """``layers`` with their type (a type checker sees ``nn.ModuleList`` items as plain ``Module``)."""
        return cast("list[LlamaDecoderLayer]", list(self.layers))

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        h = self.embed_tokens(input_ids)
        if self.fused_path is not None:
            if self.fused is None:
                self.fused = self.fused_path.supported(self)
            if self.fused:
                return self.fused_path.forward(self, h, positions, meta)
        rope = self.rope.lookup(positions, h.dtype)
        for layer in self.layers:
            h = layer(rope, h, meta)
        return self.norm(h)


class LlamaForCausalLM(nn.Module):
    """Decoder plus LM head, flattened-batch interface.

    ``forward(input_ids [T] int64, positions [T] int64, meta) -> hidden [T, H]``;
    ``compute_logits(hidden [N, H]) -> [N, vocab]`` in float32.
    """

    packed_modules_mapping: ClassVar[dict[str, tuple[str, str | int]]] = {
        "q_proj": ("qkv_proj", "q"),
        "k_proj": ("qkv_proj", "k"),
        "v_proj": ("qkv_proj", "v"),
        "gate_proj": ("gate_up_proj", 0),
        "up_proj": ("gate_up_proj", 1),
    }

    def __init__(self, config: PretrainedConfig, max_positions: int | None = None) -> None:
        super().__init__()
        self.config = config
        self.model = LlamaModel(config, max_positions or config.max_position_embeddings)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.tie_weights()

    def tie_weights(self) -> None:
        """Share the embedding with the head when the config ties them (again after the loader materializes the
        meta model, which gives each module its own new tensor)."""
        if getattr(self.config, "tie_word_embeddings", False):
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        return self.model(input_ids, positions, meta)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden).float()

    def attention_layers(self) -> list[PagedAttention]:
        return [layer.self_attn.attn for layer in self.model.decoder_layers]

    def hf_target(self, hf_name: str) -> tuple[str, slice | None]:
        """Where the HF checkpoint tensor ``hf_name`` goes: this model's parameter name, and the rows of it
        that the tensor fills when it is one shard of a fused weight (``packed_modules_mapping``), else None."""
        for hf_part, (packed, shard) in self.packed_modules_mapping.items():
            if f".{hf_part}." in hf_name:
                return hf_name.replace(f".{hf_part}.", f".{packed}."), self.shard_slice(packed, shard)
        return hf_name, None

    def shard_slice(self, packed: str, shard: str | int) -> slice:
        """Rows of a fused weight that the HF tensor ``shard`` fills."""
        attn = self.model.decoder_layers[0].self_attn
        if packed == "qkv_proj":
            starts = {"q": 0, "k": attn.q_size, "v": attn.q_size + attn.kv_size}
            size = attn.q_size if shard == "q" else attn.kv_size
            return slice(starts[str(shard)], starts[str(shard)] + size)
        inter = self.model.decoder_layers[0].mlp.intermediate_size
        return slice(int(shard) * inter, (int(shard) + 1) * inter)


def _sliding_window(config: PretrainedConfig, layer_idx: int) -> int | None:
    window = getattr(config, "sliding_window", None)
    if not window:
        return None
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None:
        return int(window) if layer_types[layer_idx] == "sliding_attention" else None
    if getattr(config, "use_sliding_window", True) is False:
        return None
    return int(window)
