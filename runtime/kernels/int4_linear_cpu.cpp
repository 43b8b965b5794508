// int4 weight-only product of activation rows (decode steps and prefill chunks), in Loom's own tile layout.
// See runtime/kernels/__init__.py (cpu_int4_linear) for why and what it measured.
//
// y[m, n] = sum_k x[m, k] * W[n, k], x float32 or bfloat16 [M, K], y [M, N] in x's dtype, with
// W[n, k] = (q[n, k] - 8) * scale[n, g] + zero[n, g], g = k / G: the grid of Int4Linear (tinygemm's), the same
// codes, scales and zero points PyTorch's int4 kernel reads.  Scales and zeros are 8-bit codes under a power-of-two
// exponent shared by eight groups of a row (Int4Linear's block grid): scale = sc * 2^es, zero = zc * 2^ez.
//
// Layout (Int4Linear.tiles), for N a multiple of 16 and K of 32:
//   tiles [N / 16, K / 8, 64] uint8: tile t, step j holds rows 16t..16t+15 at inputs 8j..8j+7; byte 4r + i
//       has q[16t + r, 8j + i] in its low nibble and q[16t + r, 8j + 4 + i] in its high one (i < 4);
//   scales_zeros [N / 16, K / G, 2, 16] uint8: per group, a tile's 16 scale codes sc (unsigned), then its 16 zero
//       codes zc (two's-complement int8);
//   exponents [N / 16, ceil(K / G / 8), 2, 16] int8: per block of eight groups, a tile's 16 scale exponents es,
//       then its 16 zero exponents ez.
// A group's scales and zeros cost 32 bytes a tile (64 as bfloat16): 4.56 bits a weight at G = 32, not 5.
// So one 64-byte load gives, after a mask and a shift, two vectors whose 32-bit lane r holds four codes of row
// r at consecutive inputs: vpdpbusd (codes unsigned, activations signed) multiplies each by the same four
// activation codes, broadcast, and adds the four products into lane r.  Sixteen output rows at once, two
// vpdpbusd per 128 weights.
//
// The activations are rounded to Q8_0 blocks of 32 first (q8_0.h, as llama.cpp's Q4 products read them); per
// block b, with d_b its scale, c its codes and the group g it falls in:
//   sum_{k in b} x_k W[n, k] = d_b * (scale[n, g] * sum q c + (zero[n, g] - 8 scale[n, g]) * sum c)
// Every row of x is computed on its own whatever M is (a row's result does not depend on its batch); up to
// four rows share each pass over a tile, so a tile's bytes are loaded and unpacked once for them.
// Tiles are split over at::parallel_for (torch.set_num_threads).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "q8_0.h"

#include <algorithm>
#include <cstdint>
#include <vector>

constexpr int64_t kExponentGroups = 8;  // groups sharing one exponent (Int4Linear's EXPONENT_GROUPS)

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#include <immintrin.h>

constexpr int64_t kRows = 4;  // activation rows sharing one pass over a tile
#define LOOM_INT4_ROWS_4 1

static inline __m512 u8x16_to_ps(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

static inline __m512 i8x16_to_ps(const void* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

// Sixteen outputs of one tile for R activation rows at once (the tile's bytes loaded and unpacked once for all
// of them): row i's codes xq[i] [K], block scales d[i] [K / 32] and code sums cs[i]; out[i] gets its 16 sums.
// Each row's operations are the same whatever R is, so its result does not depend on the rows beside it.
template <int R>
static inline void tile_dot(const uint8_t* __restrict tile, const uint8_t* __restrict sz, const int8_t* __restrict ex,
                            const int8_t* const* xq, const float* const* d, const int32_t* const* cs, int64_t K,
                            int64_t G, float* __restrict out) {
  const __m512i low = _mm512_set1_epi8(0x0F);
  __m512 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
  int64_t e_block = -1;
  __m512 scale_exp = _mm512_setzero_ps(), zero_exp = _mm512_setzero_ps();
  for (int64_t b = 0; b < K / loom::kQ8Block; ++b) {
    __m512i lo_acc[R], hi_acc[R];
    for (int i = 0; i < R; ++i) lo_acc[i] = hi_acc[i] = _mm512_setzero_si512();
    for (int64_t s = 0; s < loom::kQ8Block / 8; ++s) {  // four steps of 8 inputs
      const int64_t j = b * (loom::kQ8Block / 8) + s;
      const __m512i v = _mm512_loadu_si512(tile + j * 64);
      const __m512i lo = _mm512_and_si512(v, low), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
      for (int i = 0; i < R; ++i) {
        int32_t x_lo, x_hi;  // the four activation codes each half multiplies, as one 32-bit word
        __builtin_memcpy(&x_lo, xq[i] + 8 * j, 4);
        __builtin_memcpy(&x_hi, xq[i] + 8 * j + 4, 4);
        lo_acc[i] = _mm512_dpbusd_epi32(lo_acc[i], lo, _mm512_set1_epi32(x_lo));
        hi_acc[i] = _mm512_dpbusd_epi32(hi_acc[i], hi, _mm512_set1_epi32(x_hi));
      }
    }
    const int64_t g = b * loom::kQ8Block / G;
    if (g / kExponentGroups != e_block) {  // a new block of eight groups: its exponents, once
      e_block = g / kExponentGroups;
      scale_exp = i8x16_to_ps(ex + e_block * 32);
      zero_exp = i8x16_to_ps(ex + e_block * 32 + 16);
    }
    // sc * 2^es and zc * 2^ez: exact, the same values as the bfloat16 scales and zeros PyTorch's kernel reads
    const __m512 scale = _mm512_scalef_ps(u8x16_to_ps(sz + g * 32), scale_exp);
    const __m512 zero = _mm512_scalef_ps(i8x16_to_ps(sz + g * 32 + 16), zero_exp);
    const __m512 offset = _mm512_fnmadd_ps(_mm512_set1_ps(8.f), scale, zero);  // zero - 8 scale
    for (int i = 0; i < R; ++i) {
      const __m512 sums = _mm512_cvtepi32_ps(_mm512_add_epi32(lo_acc[i], hi_acc[i]));
      acc[i] = _mm512_fmadd_ps(_mm512_mul_ps(scale, _mm512_set1_ps(d[i][b])), sums, acc[i]);
      acc[i] = _mm512_fmadd_ps(offset, _mm512_set1_ps(d[i][b] * static_cast<float>(cs[i][b])), acc[i]);
    }
  }
  for (int i = 0; i < R; ++i) _mm512_storeu_ps(out + 16 * i, acc[i]);
}
#define LOOM_INT4_KERNEL 1
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
// AVX2 without VNNI (Zen 1-3, Intel client cores), as llama.cpp's AVX2 Q4 products: a tile's 64 bytes are two
// 32-byte halves (rows 0-7, rows 8-15), and vpmaddubsw (codes unsigned, activations signed) multiplies pairs of
// codes by pairs of activation codes into int16 lanes, which vpmaddwd sums in pairs into int32 lane r of its
// half: row r's four products, as vpdpbusd's lane.  A Q8_0 block's four steps of lo and hi halves add up in
// int16 first (at most 8 * 2 * 15 * 127 = 30,480, no saturation), one vpmaddwd a block.  Two activation rows a
// pass: AVX2 has 16 vector registers, and four rows' accumulators spill.
constexpr int64_t kRows = 2;  // activation rows sharing one pass over a tile

static inline __m256 u8x8_to_ps(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

static inline __m256i i8x8_to_epi32(const void* p) {
  return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// 2^e for int32 lanes e in [-126, 127] (Int4Linear's exponents are clamped there): exact, as vscalefps's factor.
static inline __m256 pow2(__m256i e) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23));
}

template <int R>
static inline void tile_dot(const uint8_t* __restrict tile, const uint8_t* __restrict sz, const int8_t* __restrict ex,
                            const int8_t* const* xq, const float* const* d, const int32_t* const* cs, int64_t K,
                            int64_t G, float* __restrict out) {
  const __m256i low = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  __m256 acc[R][2];
  for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  int64_t e_block = -1;
  __m256 scale_exp[2], zero_exp[2];
  for (int64_t b = 0; b < K / loom::kQ8Block; ++b) {
    __m256i sum16[R][2];
    for (int i = 0; i < R; ++i) sum16[i][0] = sum16[i][1] = _mm256_setzero_si256();
    for (int64_t s = 0; s < loom::kQ8Block / 8; ++s) {  // four steps of 8 inputs
      const int64_t j = b * (loom::kQ8Block / 8) + s;
      for (int h = 0; h < 2; ++h) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tile + j * 64 + 32 * h));
        const __m256i lo = _mm256_and_si256(v, low), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
        for (int i = 0; i < R; ++i) {
          int32_t x_lo, x_hi;  // the four activation codes each half multiplies, as one 32-bit word
          __builtin_memcpy(&x_lo, xq[i] + 8 * j, 4);
          __builtin_memcpy(&x_hi, xq[i] + 8 * j + 4, 4);
          const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_set1_epi32(x_lo)),
                                             _mm256_maddubs_epi16(hi, _mm256_set1_epi32(x_hi)));
          sum16[i][h] = _mm256_add_epi16(sum16[i][h], p);
        }
      }
    }
    const int64_t g = b * loom::kQ8Block / G;
    if (g / kExponentGroups != e_block) {  // a new block of eight groups: its exponents, once
      e_block = g / kExponentGroups;
      for (int h = 0; h < 2; ++h) {
        scale_exp[h] = pow2(i8x8_to_epi32(ex + e_block * 32 + 8 * h));
        zero_exp[h] = pow2(i8x8_to_epi32(ex + e_block * 32 + 16 + 8 * h));
      }
    }
    for (int h = 0; h < 2; ++h) {
      // sc * 2^es and zc * 2^ez: exact, the same values as the bfloat16 scales and zeros PyTorch's kernel reads
      const __m256 scale = _mm256_mul_ps(u8x8_to_ps(sz + g * 32 + 8 * h), scale_exp[h]);
      const __m256 zero = _mm256_mul_ps(_mm256_cvtepi32_ps(i8x8_to_epi32(sz + g * 32 + 16 + 8 * h)), zero_exp[h]);
      const __m256 offset = _mm256_fnmadd_ps(_mm256_set1_ps(8.f), scale, zero);  // zero - 8 scale
      for (int i = 0; i < R; ++i) {
        const __m256 sums = _mm256_cvtepi32_ps(_mm256_madd_epi16(sum16[i][h], ones));
        acc[i][h] = _mm256_fmadd_ps(_mm256_mul_ps(scale, _mm256_set1_ps(d[i][b])), sums, acc[i][h]);
        acc[i][h] = _mm256_fmadd_ps(offset, _mm256_set1_ps(d[i][b] * static_cast<float>(cs[i][b])), acc[i][h]);
      }
    }
  }
  for (int i = 0; i < R; ++i) {
    _mm256_storeu_ps(out + 16 * i, acc[i][0]);
    _mm256_storeu_ps(out + 16 * i + 8, acc[i][1]);
  }
}
#define LOOM_INT4_KERNEL 1
#endif

static at::Tensor int4_linear(const at::Tensor& x, const at::Tensor& tiles, const at::Tensor& scales_zeros,
                              const at::Tensor& exponents, int64_t group_size) {
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
                  scales_zeros.scalar_type() == at::kByte && scales_zeros.is_contiguous(),
              "int4_linear: scales_zeros must be a contiguous uint8 [N / 16, K / group_size, 2, 16] tensor");
  const int64_t groups = K / group_size, blocks_e = (groups + kExponentGroups - 1) / kExponentGroups;
  TORCH_CHECK(exponents.dim() == 4 && exponents.size(0) == T && exponents.size(1) == blocks_e &&
                  exponents.size(2) == 2 && exponents.size(3) == 16 && exponents.scalar_type() == at::kChar &&
                  exponents.is_contiguous(),
              "int4_linear: exponents must be a contiguous int8 [N / 16, ceil(K / group_size / 8), 2, 16] tensor");
  at::Tensor y = at::empty({M, N}, x.options());
#if defined(LOOM_INT4_KERNEL)
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
  const uint8_t* sp = scales_zeros.data_ptr<uint8_t>();
  const int8_t* ep = exponents.data_ptr<int8_t>();
  at::parallel_for(0, T, 8, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {  // one tile's bytes, from L1 for every row of x
      const uint8_t* tile = tp + t * (K / 8) * 64;
      const uint8_t* sz = sp + t * groups * 32;
      const int8_t* ex = ep + t * blocks_e * 32;
      for (int64_t m0 = 0; m0 < M; m0 += kRows) {  // kRows rows of x per pass over the tile
        const int rows = static_cast<int>(std::min<int64_t>(kRows, M - m0));
        const int8_t* xr[kRows];
        const float* dr[kRows];
        const int32_t* cr[kRows];
        for (int i = 0; i < rows; ++i) {
          xr[i] = &xq[(m0 + i) * K];
          dr[i] = &d[(m0 + i) * blocks];
          cr[i] = &cs[(m0 + i) * blocks];
        }
        alignas(64) float out[kRows * 16];
        switch (rows) {
          case 1: tile_dot<1>(tile, sz, ex, xr, dr, cr, K, group_size, out); break;
#if defined(LOOM_INT4_ROWS_4)
          case 2: tile_dot<2>(tile, sz, ex, xr, dr, cr, K, group_size, out); break;
          case 3: tile_dot<3>(tile, sz, ex, xr, dr, cr, K, group_size, out); break;
#endif
          default: tile_dot<kRows>(tile, sz, ex, xr, dr, cr, K, group_size, out); break;
        }
        for (int i = 0; i < rows; ++i) {
          const int64_t m = m0 + i;
          const float* f = out + 16 * i;
          if (bf16) {  // round to nearest even, as a float32 -> bfloat16 cast does
            c10::BFloat16* yb = y.data_ptr<c10::BFloat16>() + m * N + t * 16;
            for (int e = 0; e < 16; ++e) yb[e] = c10::BFloat16(f[e]);
          } else {
            std::copy(f, f + 16, y.data_ptr<float>() + m * N + t * 16);
          }
        }
      }
    }
  });
#else
  TORCH_CHECK(false, "int4_linear: this build has neither AVX-512 VNNI nor AVX2 (Int4Linear uses PyTorch's kernel then)");
#endif
  return y;
}

// torch.ops.loom.int4_linear (the namespace is defined with paged_attention)
TORCH_LIBRARY_FRAGMENT(loom, m) {
  m.def("int4_linear(Tensor x, Tensor tiles, Tensor scales_zeros, Tensor exponents, int group_size) -> Tensor");
}

TORCH_LIBRARY_IMPL(loom, CPU, m) {
  m.impl("int4_linear", &int4_linear);
}
