// Fused elementwise and row-wise steps of a quantized decoder layer (CPU).
// Loom's own kernels: see runtime/models/fused_forward.py for where they run and what they measured.
//
// A quantized layer's matmuls take bfloat16 activations and return bfloat16; the residual stream, the norms'
// arithmetic, rotary embedding and the KV cache stay float32.  Between the matmuls, eager PyTorch issues
// about 130 small ops a layer (norm, casts, splits, rotate-half, cat, KV writes, SiLU, mul); these three
// kernels do that work in one pass each, with the same float32 arithmetic per element:
//
// * add_rms_norm(residual, delta, weight, eps, bf16_out): residual += delta (in place, float32; delta may be
//   None, float32 or bfloat16), then out = weight * (r * rsqrt(mean(r^2) + eps)) in bfloat16 (the next
//   matmul's input) or float32 (the LM head's).  RMSNorm: Zhang & Sennrich 2019.
// * rope_kv_write(qkv, bias, cos, sin, k_cache, v_cache, slot_mapping, num_heads, num_kv_heads) -> (q, k, v):
//   qkv bfloat16 [T, (Hq + 2 Hkv) D] (+ float32 bias [(Hq + 2 Hkv) D]) widened to float32; q and k rotated
//   with rotate-half RoPE (Su et al. 2021; x * cos + rotate_half(x) * sin, cos/sin float32 [T, D]); k and v
//   written at slot_mapping [T] int64 into k_cache / v_cache [slots, Hkv, D] float32 (skipped when the cache
//   is empty); returns float32 q [T, Hq, D], k and v [T, Hkv, D].
// * silu_mul(gate_up) -> bfloat16 [T, I]: silu(gate) * up of gate_up bfloat16 [T, 2 I], in float32.
//
// Each output row depends only on its own input row, so a request's result does not change with the batch
// it is decoded in.  Rows are split over at::parallel_for (torch.set_num_threads).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <c10/util/Optional.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <tuple>

using c10::BFloat16;

static at::Tensor add_rms_norm(at::Tensor residual, const c10::optional<at::Tensor>& delta, const at::Tensor& weight,
                               double eps, bool bf16_out) {
  TORCH_CHECK(residual.dim() == 2 && residual.scalar_type() == at::kFloat && residual.is_contiguous(),
              "add_rms_norm: residual must be a contiguous float32 [T, H] tensor");
  const int64_t T = residual.size(0), H = residual.size(1);
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == H && weight.scalar_type() == at::kFloat && weight.is_contiguous(),
              "add_rms_norm: weight must be a contiguous float32 [H] tensor");
  const bool has_delta = delta.has_value() && delta->defined();
  if (has_delta) {
    TORCH_CHECK(delta->sizes() == residual.sizes() && delta->is_contiguous() &&
                    (delta->scalar_type() == at::kFloat || delta->scalar_type() == at::kBFloat16),
                "add_rms_norm: delta must be a contiguous float32 or bfloat16 tensor shaped like residual");
  }
  at::Tensor out = at::empty({T, H}, residual.options().dtype(bf16_out ? at::kBFloat16 : at::kFloat));
  float* rp = residual.data_ptr<float>();
  const float* wp = weight.data_ptr<float>();
  const bool delta_bf16 = has_delta && delta->scalar_type() == at::kBFloat16;
  const float* dp = has_delta && !delta_bf16 ? delta->data_ptr<float>() : nullptr;
  const BFloat16* dbp = delta_bf16 ? delta->data_ptr<BFloat16>() : nullptr;
  const float feps = static_cast<float>(eps);
  at::parallel_for(0, T, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* r = rp + t * H;
      if (dp != nullptr) {
        const float* d = dp + t * H;
#pragma omp simd
        for (int64_t h = 0; h < H; ++h) r[h] += d[h];
      } else if (dbp != nullptr) {
        const BFloat16* d = dbp + t * H;
#pragma omp simd
        for (int64_t h = 0; h < H; ++h) r[h] += static_cast<float>(d[h]);
      }
      float ss = 0.f;
#pragma omp simd reduction(+ : ss)
      for (int64_t h = 0; h < H; ++h) ss += r[h] * r[h];
      const float inv = 1.f / std::sqrt(ss / static_cast<float>(H) + feps);
      if (bf16_out) {
        BFloat16* o = out.data_ptr<BFloat16>() + t * H;
        for (int64_t h = 0; h < H; ++h) o[h] = static_cast<BFloat16>(wp[h] * (r[h] * inv));
      } else {
        float* o = out.data_ptr<float>() + t * H;
#pragma omp simd
        for (int64_t h = 0; h < H; ++h) o[h] = wp[h] * (r[h] * inv);
      }
    }
  });
  return out;
}

// x (float32, D) rotated in place: x * cos + rotate_half(x) * sin, rotate_half(x) = (-x[half:], x[:half]).
static inline void rotate(float* __restrict x, const float* __restrict cos, const float* __restrict sin,
                          int64_t D) {
  const int64_t half = D / 2;
  float lo[512];
#pragma omp simd
  for (int64_t j = 0; j < half; ++j) lo[j] = x[j];
#pragma omp simd
  for (int64_t j = 0; j < half; ++j) x[j] = x[j] * cos[j] - x[j + half] * sin[j];
#pragma omp simd
  for (int64_t j = half; j < D; ++j) x[j] = x[j] * cos[j] + lo[j - half] * sin[j];
}

static std::tuple<at::Tensor, at::Tensor, at::Tensor> rope_kv_write(
    const at::Tensor& qkv, const c10::optional<at::Tensor>& bias, const at::Tensor& cos, const at::Tensor& sin,
    at::Tensor k_cache, at::Tensor v_cache, const at::Tensor& slot_mapping, int64_t num_heads, int64_t num_kv_heads) {
  TORCH_CHECK(qkv.dim() == 2 && qkv.scalar_type() == at::kBFloat16 && qkv.is_contiguous(),
              "rope_kv_write: qkv must be a contiguous bfloat16 [T, (Hq + 2 Hkv) D] tensor");
  const int64_t T = qkv.size(0), W = qkv.size(1), heads = num_heads + 2 * num_kv_heads;
  TORCH_CHECK(heads > 0 && W % heads == 0, "rope_kv_write: qkv's width is not (num_heads + 2 num_kv_heads) * D");
  const int64_t D = W / heads;
  TORCH_CHECK(D % 2 == 0 && D <= 1024, "rope_kv_write: head_dim must be even and at most 1024");
  TORCH_CHECK(cos.dim() == 2 && cos.size(0) == T && cos.size(1) == D && cos.scalar_type() == at::kFloat &&
                  cos.is_contiguous() && sin.sizes() == cos.sizes() && sin.scalar_type() == at::kFloat &&
                  sin.is_contiguous(),
              "rope_kv_write: cos and sin must be contiguous float32 [T, D] tensors");
  const bool has_bias = bias.has_value() && bias->defined();
  if (has_bias) {
    TORCH_CHECK(bias->dim() == 1 && bias->size(0) == W && bias->scalar_type() == at::kFloat && bias->is_contiguous(),
                "rope_kv_write: bias must be a contiguous float32 [(Hq + 2 Hkv) D] tensor");
  }
  const bool write = k_cache.numel() > 0;
  if (write) {
    TORCH_CHECK(k_cache.dim() == 3 && k_cache.size(1) == num_kv_heads && k_cache.size(2) == D &&
                    k_cache.scalar_type() == at::kFloat && k_cache.is_contiguous() &&
                    v_cache.sizes() == k_cache.sizes() && v_cache.scalar_type() == at::kFloat &&
                    v_cache.is_contiguous(),
                "rope_kv_write: k_cache and v_cache must be contiguous float32 [slots, Hkv, D] tensors");
    TORCH_CHECK(slot_mapping.dim() == 1 && slot_mapping.size(0) == T && slot_mapping.scalar_type() == at::kLong &&
                    slot_mapping.is_contiguous(),
                "rope_kv_write: slot_mapping must be a contiguous int64 [T] tensor");
  }
  const int64_t QW = num_heads * D, KW = num_kv_heads * D;
  auto f32 = qkv.options().dtype(at::kFloat);
  at::Tensor q = at::empty({T, num_heads, D}, f32), k = at::empty({T, num_kv_heads, D}, f32),
             v = at::empty({T, num_kv_heads, D}, f32);
  const BFloat16* xp = qkv.data_ptr<BFloat16>();
  const float* bp = has_bias ? bias->data_ptr<float>() : nullptr;
  const float *cp = cos.data_ptr<float>(), *sp = sin.data_ptr<float>();
  float *qp = q.data_ptr<float>(), *kp = k.data_ptr<float>(), *vp = v.data_ptr<float>();
  const int64_t slots = write ? k_cache.size(0) : 0;
  const int64_t* slot = write ? slot_mapping.data_ptr<int64_t>() : nullptr;
  if (write) {
    for (int64_t t = 0; t < T; ++t) {
      TORCH_CHECK(slot[t] >= 0 && slot[t] < slots, "rope_kv_write: slot_mapping holds a slot outside the cache");
    }
  }
  float* kc = write ? k_cache.data_ptr<float>() : nullptr;
  float* vc = write ? v_cache.data_ptr<float>() : nullptr;
  at::parallel_for(0, T, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const BFloat16* x = xp + t * W;
      float* out[3] = {qp + t * QW, kp + t * KW, vp + t * KW};
      const int64_t width[3] = {QW, KW, KW}, start[3] = {0, QW, QW + KW};
      for (int part = 0; part < 3; ++part) {
        float* o = out[part];
        const BFloat16* src = x + start[part];
        if (bp != nullptr) {
          const float* b = bp + start[part];
#pragma omp simd
          for (int64_t j = 0; j < width[part]; ++j) o[j] = static_cast<float>(src[j]) + b[j];
        } else {
#pragma omp simd
          for (int64_t j = 0; j < width[part]; ++j) o[j] = static_cast<float>(src[j]);
        }
      }
      const float *c = cp + t * D, *s = sp + t * D;
      for (int64_t h = 0; h < num_heads; ++h) rotate(out[0] + h * D, c, s, D);
      for (int64_t h = 0; h < num_kv_heads; ++h) rotate(out[1] + h * D, c, s, D);
      if (write) {
        std::copy(out[1], out[1] + KW, kc + slot[t] * KW);
        std::copy(out[2], out[2] + KW, vc + slot[t] * KW);
      }
    }
  });
  return {q, k, v};
}

static at::Tensor silu_mul(const at::Tensor& gate_up) {
  TORCH_CHECK(gate_up.dim() == 2 && gate_up.size(1) % 2 == 0 && gate_up.scalar_type() == at::kBFloat16 &&
                  gate_up.is_contiguous(),
              "silu_mul: gate_up must be a contiguous bfloat16 [T, 2 I] tensor");
  const int64_t T = gate_up.size(0), I = gate_up.size(1) / 2;
  at::Tensor out = at::empty({T, I}, gate_up.options());
  const BFloat16* xp = gate_up.data_ptr<BFloat16>();
  BFloat16* op = out.data_ptr<BFloat16>();
  at::parallel_for(0, T, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const BFloat16 *g = xp + t * 2 * I, *u = g + I;
      BFloat16* o = op + t * I;
      for (int64_t j = 0; j < I; ++j) {
        const float gj = static_cast<float>(g[j]);
        o[j] = static_cast<BFloat16>(gj / (1.f + std::exp(-gj)) * static_cast<float>(u[j]));
      }
    }
  });
  return out;
}

// torch.ops.loom.{add_rms_norm, rope_kv_write, silu_mul} (the namespace is defined with paged_attention)
TORCH_LIBRARY_FRAGMENT(loom, m) {
  m.def("add_rms_norm(Tensor(a!) residual, Tensor? delta, Tensor weight, float eps, bool bf16_out) -> Tensor");
  m.def("rope_kv_write(Tensor qkv, Tensor? bias, Tensor cos, Tensor sin, Tensor(a!) k_cache, Tensor(b!) v_cache, "
        "Tensor slot_mapping, int num_heads, int num_kv_heads) -> (Tensor, Tensor, Tensor)");
  m.def("silu_mul(Tensor gate_up) -> Tensor");
}

TORCH_LIBRARY_IMPL(loom, CPU, m) {
  m.impl("add_rms_norm", &add_rms_norm);
  m.impl("rope_kv_write", &rope_kv_write);
  m.impl("silu_mul", &silu_mul);
}
