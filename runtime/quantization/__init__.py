"""Weight-only quantization for the CPU decode path: int8 per channel, int4 per group.

Decoding reads every weight once per step, so at batch 1 a step costs about
the weights' bytes divided by memory bandwidth.  Storing the weights of every
``nn.Linear`` of attention and MLP, and of the LM head, in 8 or 4 bits cuts
those bytes 4x or about 7x; activations and the KV cache keep the engine's
dtype.  The matmuls are PyTorch's own weight-only kernels (the ones torchao
and gpt-fast call): ``torch.ops.aten._weight_int8pack_mm`` and
``_weight_int4pack_mm_for_cpu`` (tinygemm's layout, packed by
``_convert_weight_to_int4pack_for_cpu``), fed bfloat16 activations, which is
where they are fastest on CPU.  Where Loom's own kernels are built, decode rows take them
instead (:func:`loom.runtime.kernels.cpu_int8_linear`, :func:`~loom.runtime.kernels.cpu_int4_linear`:
activations rounded to Q8_0 blocks and integer dot products, as llama.cpp computes).

- ``int8``: symmetric, one float scale per output channel
  (``w = q * scale``, ``q`` in [-127, 127]).
- ``int4``: asymmetric, one scale and one zero per group of ``group_size``
  input channels (tinygemm's grid: ``w = (q - 8) * scale + zero``, ``q`` in
  [0, 15]), the range of each group chosen to minimise its squared error over
  a few clipping ratios (the search llama.cpp's k-quants and AWQ's clipping
  do), so a weight that already lies on a 4-bit grid (a model converted from a
  ``Q4_1`` GGUF) is reproduced exactly up to bfloat16 rounding of the scales.
- Tied embeddings (SmolLM2, Qwen2.5): the head's matmul reads the quantized
  copy; the embedding lookup reads int8 rows of the same weight
  (:class:`QuantizedEmbedding`), so no float copy of the vocabulary matrix is
  kept.

:func:`quantize_model` swaps the modules of a loaded float model in place;
:mod:`.stream` quantizes a checkpoint (safetensors or GGUF) as it reads it,
with no float copy of the model, to the same tensors; :mod:`.cache` stores the
quantized tensors under ``$LOOM_CACHE`` so a second start skips the work, and
:func:`use_cpu_kernel_layouts` then moves int4 layers to Loom's kernel layout.
"""

from loom.runtime.quantization.apply import (
    QUANTIZATION_METHODS,
    quantize_model,
    quantized_bytes,
    use_cpu_kernel_layouts,
    use_cuda_layouts,
)
from loom.runtime.quantization.int4 import Int4Linear, quantize_int4
from loom.runtime.quantization.int8 import Int8Linear, QuantizedEmbedding, quantize_int8

__all__ = [
    "QUANTIZATION_METHODS",
    "Int4Linear",
    "Int8Linear",
    "QuantizedEmbedding",
    "quantize_int4",
    "quantize_int8",
    "quantize_model",
    "quantized_bytes",
    "use_cpu_kernel_layouts",
    "use_cuda_layouts",
]
