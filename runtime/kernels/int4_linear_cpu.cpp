// int4 weight-only product for a few rows of activations (decode steps), in Loom's own tile layout.
// See runtime/kernels/__init__.py (cpu_int4_linear) for why and what it measured.
//
// y[m, n] = sum_k x[m, k] * W[n, k] (x float32 or bfloat16 [M, K], y [M, N] in x's dtype), W[n, k] = (q[n, k] - 8) * scale[n, g] + zero[n, g], g = k / G: the grid of
// Int4Linear (tinygemm's), the same codes, scales and zero points PyTorch's int4 kernel reads.
//
// Layout (Int4Linear.tiles), for N a multiple of 16 and K of 32:
//   tiles [N / 16, K / 8, 64] uint8: tile t, step j holds rows 16t..16t+15 at inputs 8j..8j+7; byte 4r + i
//       has q[16t + r, 8j + i] in its low nibble and q[16t + r, 8j + 4 + i] in its high one (i < 4);
//   scales_zeros [N / 16, K / G, 2, 16] bfloat16: a tile's 16 scales, then its 16 zero points, per group.
// So one 64-byte load gives, after a mask and a shift, two vectors whose 32-bit lane r holds four codes of row
// r at consecutive inputs: vpdpbusd (codes unsigned, activations signed) multiplies each by the same four
// activation codes, broadcast, and adds the four products into lane r.  Sixteen output rows at once, two
// vpdpbusd per 128 weights.
//
// The activations are rounded to Q8_0 blocks of 32 first (q8_0.h, as llama.cpp's Q4 products read them); per
// block b, with d_b its scale, c its codes and the group g it falls in:
//   sum_{k in b} x_k W[n, k] = d_b * (scale[n, g] * sum q c + (zero[n, g] - 8 scale[n, g]) * sum c)
// Every row of x is computed on its own whatever M is (a row's result does not depend on its batch).
// Tiles are split over at::parallel_for (torch.set_num_threads).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "q8_0.h"

#include <cstdint>
#include <vector>

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#include <immintrin.h>

static inline __m512 bf16x16_to_ps(const c10::BFloat16* p) {
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}

// Sixteen outputs of one tile for one activation row: codes xq [K], block scales d [K / 32], code sums cs.
static inline __m512 tile_dot(const uint8_t* __restrict tile, const c10::BFloat16* __restrict sz,
                              const int8_t* __restrict xq, const float* __restrict d, const int32_t* __restrict cs,
                              int64_t K, int64_t G) {
  const __m512i low = _mm512_set1_epi8(0x0F);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t b = 0; b < K / loom::kQ8Block; ++b) {
    __m512i lo_acc = _mm512_setzero_si512(), hi_acc = _mm512_setzero_si512();
    for (int64_t s = 0; s < loom::kQ8Block / 8; ++s) {  // four steps of 8 inputs
      const int64_t j = b * (loom::kQ8Block / 8) + s;
      const __m512i v = _mm512_loadu_si512(tile + j * 64);
      int32_t x_lo, x_hi;  // the four activation codes each half multiplies, as one 32-bit word
      __builtin_memcpy(&x_lo, xq + 8 * j, 4);
      __builtin_memcpy(&x_hi, xq + 8 * j + 4, 4);
      lo_acc = _mm512_dpbusd_epi32(lo_acc, _mm512_and_si512(v, low), _mm512_set1_epi32(x_lo));
      hi_acc = _mm512_dpbusd_epi32(hi_acc, _mm512_and_si512(_mm512_srli_epi16(v, 4), low), _mm512_set1_epi32(x_hi));
    }
    const int64_t g = b * loom::kQ8Block / G;
    const __m512 scale = bf16x16_to_ps(sz + g * 32), zero = bf16x16_to_ps(sz + g * 32 + 16);
    const __m512 db = _mm512_set1_ps(d[b]);
    const __m512 sums = _mm512_cvtepi32_ps(_mm512_add_epi32(lo_acc, hi_acc));
    const __m512 offset = _mm512_fnmadd_ps(_mm512_set1_ps(8.f), scale, zero);  // zero - 8 scale
    acc = _mm512_fmadd_ps(_mm512_mul_ps(scale, db), sums, acc);
    acc = _mm512_fmadd_ps(offset, _mm512_set1_ps(d[b] * static_cast<float>(cs[b])), acc);
  }
  return acc;
}
#endif

static at::Tensor int4_linear(const at::Tensor& x, const at::Tensor& tiles, const at::Tensor& scales_zeros,
                              int64_t group_size) {
  TORCH_CHECK(x.dim() == 2 && (x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16) &&
                  x.is_contiguous(),
              "int4_linear: x must be a contiguous float32 or bfloat16 [M, K] tensor");
  const int64_t M = x.size(0), K = x.size(1);
  TORCH_CHECK(K % 32 == 0 && group_size % 32 == 0 && K % group_size == 0,
              "int4_linear: K and group_size must be multiples of 32, K of group_size");
  TORCH_CHECK(tiles.dim() == 3 && tiles.size(1) == K / 8 && tiles.size(2) == 64 &&
                  tiles.scalar_type() == at::kByte && tiles.is_contiguous(),
              "int4_linear: tiles must be a contiguous uint8 [N / 16, K / 8, 64] tensor");
  const int64_t T = tiles.size(0), N = T * 16;
  TORCH_CHECK(scales_zeros.dim() == 4 && scales_zeros.size(0) == T && scales_zeros.size(1) == K / group_size &&
                  scales_zeros.size(2) == 2 && scales_zeros.size(3) == 16 &&
                  scales_zeros.scalar_type() == at::kBFloat16 && scales_zeros.is_contiguous(),
              "int4_linear: scales_zeros must be a contiguous bfloat16 [N / 16, K / group_size, 2, 16] tensor");
  at::Tensor y = at::empty({M, N}, x.options());
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  const int64_t blocks = K / loom::kQ8Block;
  std::vector<int8_t> xq(static_cast<size_t>(M * K));
  std::vector<float> d(static_cast<size_t>(M * blocks));
  std::vector<int32_t> cs(static_cast<size_t>(M * blocks));
  const bool bf16 = x.scalar_type() == at::kBFloat16;
  for (int64_t m = 0; m < M; ++m) {
    if (bf16)
      loom::quantize_q8_0(x.data_ptr<c10::BFloat16>() + m * K, K, &xq[m * K], &d[m * blocks], &cs[m * blocks]);
    else
      loom::quantize_q8_0(x.data_ptr<float>() + m * K, K, &xq[m * K], &d[m * blocks], &cs[m * blocks]);
  }
  const uint8_t* tp = tiles.data_ptr<uint8_t>();
  const c10::BFloat16* sp = scales_zeros.data_ptr<c10::BFloat16>();
  at::parallel_for(0, T, 8, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {  // one tile's bytes, from L1 for every row of x
      const uint8_t* tile = tp + t * (K / 8) * 64;
      const c10::BFloat16* sz = sp + t * (K / group_size) * 32;
      for (int64_t m = 0; m < M; ++m) {
        const __m512 out = tile_dot(tile, sz, &xq[m * K], &d[m * blocks], &cs[m * blocks], K, group_size);
        if (bf16) {  // round to nearest even, as a float32 -> bfloat16 cast does
          alignas(64) float f[16];
          _mm512_store_ps(f, out);
          c10::BFloat16* yb = y.data_ptr<c10::BFloat16>() + m * N + t * 16;
          for (int i = 0; i < 16; ++i) yb[i] = c10::BFloat16(f[i]);
        } else {
          _mm512_storeu_ps(y.data_ptr<float>() + m * N + t * 16, out);
        }
      }
    }
  });
#else
  TORCH_CHECK(false, "int4_linear: this build has no AVX-512 VNNI (Int4Linear uses PyTorch's kernel then)");
#endif
  return y;
}

// torch.ops.loom.int4_linear (the namespace is defined with paged_attention)
TORCH_LIBRARY_FRAGMENT(loom, m) {
  m.def("int4_linear(Tensor x, Tensor tiles, Tensor scales_zeros, int group_size) -> Tensor");
}

TORCH_LIBRARY_IMPL(loom, CPU, m) { m.impl("int4_linear", &int4_linear); }
