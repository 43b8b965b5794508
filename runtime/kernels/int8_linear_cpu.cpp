// int8 weight-only product for a few rows of activations (decode steps).
// Loom's own kernel: see runtime/kernels/__init__.py (cpu_int8_linear) for why and what it measured.
//
// y[m, n] = scale[n] * sum_k x[m, k] * q[n, k], x float32 or bfloat16 [M, K], y [M, N] in x's dtype, q int8
// [N, K] (row-major), scale bfloat16 [N] (Int8Linear's own buffer, as aten::_weight_int8pack_mm takes it).
// Every row of x is one dot product per output, the same loop whatever M is, so a row's result does not
// depend on the rows beside it (a request's output does not change with the batch it is decoded in).  Rows
// of q are split over at::parallel_for (torch.set_num_threads).  Each weight row is read once as int8 (a
// quarter of float32's bytes).  Three ways to the dot product:
//
// * With AVX-512 VNNI and K a multiple of 64 (every shape of the registered models), x is first quantized
//   per row to int8 in blocks of 32 with one float32 scale a block (symmetric, round to nearest: llama.cpp's
//   Q8_0, the activations its Q8_0 and Q4 dot products read), and a row's products are integer:
//   vpdpbusd multiplies 64 weight bytes by 64 activation bytes and sums them in fours into 16 int32 lanes,
//   each lane inside one block, so a lane's sum is scaled by its block's scale and added into float32
//   accumulators.  vpdpbusd takes one unsigned operand: the weight is read as q + 128 (a XOR of the sign bit)
//   and 128 * sum(x_q * block scale), once a row of x, is taken off the total.  Five instructions per 64
//   weights where widening each weight to float32 takes sixteen: the widening loop ran at 19-22 GB/s on a
//   2-core Zen 4, under the 30-36 GB/s the cores read; this one reads at the memory's rate.
// * With AVX2 (no VNNI) and K a multiple of 64, the same with 7-bit activation codes and vpmaddubsw (below).
// * Otherwise each weight is widened to float32 in registers and multiplied by float32 x (AVX-512 with four
//   independent accumulators per row: one chain of FMAs would bound the loop by FMA latency, 2x slower at
//   2 threads), float32 sums.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "q8_0.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
// 16 int8 weights widened to float32 in registers; four independent accumulators so the FMAs of one row
// do not wait on each other (one chain would bound a 576-wide row by FMA latency, not by memory).
static inline float dot_i8(const float* __restrict x, const int8_t* __restrict q, int64_t K) {
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  int64_t k = 0;
  for (; k + 64 <= K; k += 64) {
    for (int j = 0; j < 4; ++j) {
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + k + 16 * j));
      acc[j] = _mm512_fmadd_ps(_mm512_loadu_ps(x + k + 16 * j), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)), acc[j]);
    }
  }
  for (; k + 16 <= K; k += 16) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + k));
    acc[0] = _mm512_fmadd_ps(_mm512_loadu_ps(x + k), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)), acc[0]);
  }
  float sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
  for (; k < K; ++k) sum += x[k] * static_cast<float>(q[k]);
  return sum;
}
#else
static inline float dot_i8(const float* __restrict x, const int8_t* __restrict q, int64_t K) {
  float acc = 0.f;
#pragma omp simd reduction(+ : acc)
  for (int64_t k = 0; k < K; ++k) acc += x[k] * static_cast<float>(q[k]);
  return acc;
}
#endif

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
constexpr int64_t kPrefetchBytes = 4096;  // how far ahead of the row being read its bytes are prefetched

// x [K] float32 -> xq [K] int8 (Q8_0, q8_0.h) and lane_scale [K / 4]: the scale of the block each group of four
// belongs to (the int32 lane vpdpbusd sums them into); returns 128 * sum_k xq[k] * scale(k), the weight
// offset's share.
template <typename T>
static float quantize_row(const T* __restrict x, int64_t K, int8_t* __restrict xq, float* __restrict lane_scale) {
  std::vector<float> scale(static_cast<size_t>(K / loom::kQ8Block));
  std::vector<int32_t> code_sum(scale.size());
  loom::quantize_q8_0(x, K, xq, scale.data(), code_sum.data());
  float offset = 0.f;
  for (size_t b = 0; b < scale.size(); ++b) {
    for (int64_t g = 0; g < loom::kQ8Block / 4; ++g) lane_scale[b * loom::kQ8Block / 4 + g] = scale[b];
    offset += 128.f * scale[b] * static_cast<float>(code_sum[b]);
  }
  return offset;
}

// sum_k (q[k] + 128) * xq[k] * scale(k), K a multiple of 64; 16 int32 lanes of 4 products each per vpdpbusd.
static inline float dot_vnni(const int8_t* __restrict xq, const float* __restrict lane_scale,
                             const int8_t* __restrict q, int64_t K) {
  const __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  int64_t k = 0;
  for (; k + 256 <= K; k += 256) {
    for (int j = 0; j < 4; ++j) {
      const int64_t o = k + 64 * j;
      _mm_prefetch(reinterpret_cast<const char*>(q + o + kPrefetchBytes), _MM_HINT_T0);
      const __m512i w = _mm512_xor_si512(_mm512_loadu_si512(q + o), sign);
      const __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, _mm512_loadu_si512(xq + o));
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_loadu_ps(lane_scale + o / 4), acc[j]);
    }
  }
  for (; k < K; k += 64) {
    const __m512i w = _mm512_xor_si512(_mm512_loadu_si512(q + k), sign);
    const __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, _mm512_loadu_si512(xq + k));
    acc[0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_loadu_ps(lane_scale + k / 4), acc[0]);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
}
#define LOOM_INT8_VNNI 1
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
// AVX2 without VNNI (Zen 1-3, Intel client cores): integer products on activations rounded to 7-bit codes
// (blocks of 32, one float32 scale a block, |code| <= 63: q8_0.h with kQ7MaxCode).  vpmaddubsw takes one
// unsigned operand; the weight byte is read as q + 128 (a XOR of the sign bit, as the VNNI path reads it), so a
// pair's products sum to at most 2 * 255 * 63 = 32130 and the int16 lanes never saturate.  vpmaddwd sums those
// pairs into 8 int32 lanes, each block's sum is scaled by its block's scale into float32 accumulators, and
// 128 * sum(code * block scale), once a row of x, is taken off the total.  Four operations per 32 products of
// a (weight row, activation row) pair, where llama.cpp's Q8_0 dot product (8-bit codes, so the sign trick:
// |xq| * (q * sign(xq))) takes five plus the |xq|: on a 2-core Zen 3, 51.5 against 41.4 GMAC/s a thread at 48
// rows (medians of 6), the decode step of 32 sequences being 92% this kernel.  The price is one bit of the
// activations: about 1% relative error of a Gaussian row's product against Q8_0's 0.5%.
// Four weight rows q[0..3] against R activation rows (codes and block scales, K a multiple of 32): each weight
// block is loaded once for the R rows, four weight rows stream from memory at once with the rows two groups on
// prefetched, and one horizontal reduction serves all four (a small layer's rows are 576-1,536 bytes, where one
// reduction a row was a tenth of the work).  Every (weight row, activation row) pair goes through the same
// operations whatever R is, so a row's result does not depend on the rows decoded beside it.
//
// Q7 false keeps Q8_0's 8-bit codes (the LM head's, Int8Linear.q8_0_activations: its products are the logits, where
// a near tie between two tokens turns on the error) through llama.cpp's sign trick, |xq| * (q * sign(xq)), at
// most 2 * 127 * 127 a pair: one vpsignb and one vpabsb more per block, no weight offset.
template <bool Q7, int R>
static inline void dot4_avx2(const int8_t* const* xq, const float* const* block_scale, const int8_t* const* q,
                             int64_t K, __m128* out) {
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i sign = _mm256_set1_epi8(static_cast<char>(0x80));
  __m256 acc[R][4];
  for (int m = 0; m < R; ++m)
    for (int r = 0; r < 4; ++r) acc[m][r] = _mm256_setzero_ps();
  const char* next = reinterpret_cast<const char*>(q[0] + 8 * K);  // the rows two groups on, read while these are
  for (int64_t k = 0; k < K; k += 32) {
    _mm_prefetch(next + 4 * k, _MM_HINT_T0);
    _mm_prefetch(next + 4 * k + 64, _MM_HINT_T0);
    __m256i x[R], ax[R];
    __m256 d[R];
    for (int m = 0; m < R; ++m) {
      x[m] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq[m] + k));
      if constexpr (!Q7) ax[m] = _mm256_abs_epi8(x[m]);
      d[m] = _mm256_set1_ps(block_scale[m][k / 32]);
    }
    for (int r = 0; r < 4; ++r) {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q[r] + k));
      const __m256i wu = Q7 ? _mm256_xor_si256(w, sign) : w;  // q + 128, unsigned
      for (int m = 0; m < R; ++m) {
        const __m256i pairs =
            Q7 ? _mm256_maddubs_epi16(wu, x[m]) : _mm256_maddubs_epi16(ax[m], _mm256_sign_epi8(w, x[m]));
        const __m256i sums = _mm256_madd_epi16(pairs, ones);
        acc[m][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), d[m], acc[m][r]);
      }
    }
  }
  for (int m = 0; m < R; ++m) {
    const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(acc[m][0], acc[m][1]), _mm256_hadd_ps(acc[m][2], acc[m][3]));
    out[m] = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));  // the four rows' sums
  }
}
#define LOOM_INT8_AVX2 1
#endif

static at::Tensor int8_linear(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scale, bool q8_0) {
  TORCH_CHECK(x.dim() == 2 && (x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16) &&
                  x.is_contiguous(),
              "int8_linear: x must be a contiguous float32 or bfloat16 [M, K] tensor");
  TORCH_CHECK(q.dim() == 2 && q.size(1) == x.size(1) && q.scalar_type() == at::kChar && q.is_contiguous(),
              "int8_linear: q must be a contiguous int8 [N, K] tensor");
  TORCH_CHECK(scale.dim() == 1 && scale.size(0) == q.size(0) && scale.scalar_type() == at::kBFloat16 &&
                  scale.is_contiguous(),
              "int8_linear: scale must be a contiguous bfloat16 [N] tensor");
  const int64_t M = x.size(0), K = x.size(1), N = q.size(0);
  const bool bf16 = x.scalar_type() == at::kBFloat16;
  at::Tensor y = at::empty({M, N}, x.options().dtype(at::kFloat));  // y in x's dtype on return
  const int8_t* qp = q.data_ptr<int8_t>();
  const c10::BFloat16* sp = scale.data_ptr<c10::BFloat16>();
  float* yp = y.data_ptr<float>();
#if defined(LOOM_INT8_VNNI)
  if (K % 64 == 0) {
    std::vector<int8_t> xq(static_cast<size_t>(M * K));
    std::vector<float> lane_scale(static_cast<size_t>(M * K / 4)), offset(static_cast<size_t>(M));
    for (int64_t m = 0; m < M; ++m)
      offset[m] = bf16 ? quantize_row(x.data_ptr<c10::BFloat16>() + m * K, K, &xq[m * K], &lane_scale[m * K / 4])
                       : quantize_row(x.data_ptr<float>() + m * K, K, &xq[m * K], &lane_scale[m * K / 4]);
    at::parallel_for(0, N, 256, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n) {  // one weight row, from L1 for every row of x
        const float s = static_cast<float>(sp[n]);
        for (int64_t m = 0; m < M; ++m)
          yp[m * N + n] = (dot_vnni(&xq[m * K], &lane_scale[m * K / 4], qp + n * K, K) - offset[m]) * s;
      }
    });
    return bf16 ? y.to(at::kBFloat16) : y;
  }
#elif defined(LOOM_INT8_AVX2)
  if (K % 64 == 0) {
    const int64_t blocks = K / loom::kQ8Block;
    std::vector<int8_t> xq(static_cast<size_t>(M * K));
    std::vector<float> d(static_cast<size_t>(M * blocks)), offset(static_cast<size_t>(M));
    std::vector<int32_t> code_sum(d.size());
    for (int64_t m = 0; m < M; ++m) {
      const int max_code = q8_0 ? loom::kQ8MaxCode : loom::kQ7MaxCode;
      if (bf16)
        loom::quantize_q8_0(x.data_ptr<c10::BFloat16>() + m * K, K, &xq[m * K], &d[m * blocks], &code_sum[m * blocks],
                            max_code);
      else
        loom::quantize_q8_0(x.data_ptr<float>() + m * K, K, &xq[m * K], &d[m * blocks], &code_sum[m * blocks],
                            max_code);
      float o = 0.f;  // the weight offset's share: 128 * sum_k xq[k] * scale(k); none under the sign trick
      for (int64_t b = 0; b < blocks && !q8_0; ++b)
        o += 128.f * d[m * blocks + b] * static_cast<float>(code_sum[m * blocks + b]);
      offset[m] = o;
    }
    at::parallel_for(0, (N + 3) / 4, 64, [&](int64_t g0, int64_t g1) {
      for (int64_t n = 4 * g0; n < std::min(N, 4 * g1); n += 4) {  // four weight rows, from L1 for every row of x
        const int64_t valid = std::min<int64_t>(4, N - n);  // the last group repeats its last row
        const int8_t* rows[4];
        alignas(16) float sc[4];
        for (int r = 0; r < 4; ++r) {
          const int64_t row = n + std::min<int64_t>(r, valid - 1);
          rows[r] = qp + row * K;
          sc[r] = static_cast<float>(sp[row]);
        }
        const __m128 s = _mm_load_ps(sc);
        for (int64_t m = 0; m < M; m += 2) {  // two activation rows a pass over the four weight rows
          const int R = M - m >= 2 ? 2 : 1;
          const int8_t* xr[2] = {&xq[m * K], &xq[(m + R - 1) * K]};
          const float* dr[2] = {&d[m * blocks], &d[(m + R - 1) * blocks]};
          __m128 sums[2];
          if (q8_0)
            R == 2 ? dot4_avx2<false, 2>(xr, dr, rows, K, sums) : dot4_avx2<false, 1>(xr, dr, rows, K, sums);
          else
            R == 2 ? dot4_avx2<true, 2>(xr, dr, rows, K, sums) : dot4_avx2<true, 1>(xr, dr, rows, K, sums);
          for (int i = 0; i < R; ++i) {
            alignas(16) float out[4];
            _mm_store_ps(out, _mm_mul_ps(_mm_sub_ps(sums[i], _mm_set1_ps(offset[m + i])), s));
            std::copy(out, out + valid, yp + (m + i) * N + n);
          }
        }
      }
    });
    return bf16 ? y.to(at::kBFloat16) : y;
  }
#endif
  const at::Tensor xf = x.to(at::kFloat);
  const float* xp = xf.data_ptr<float>();
  at::parallel_for(0, N, 256, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {  // one weight row, from L1 for every row of x
      const float s = static_cast<float>(sp[n]);
      for (int64_t m = 0; m < M; ++m) yp[m * N + n] = dot_i8(xp + m * K, qp + n * K, K) * s;
    }
  });
  return bf16 ? y.to(at::kBFloat16) : y;
}

// torch.ops.loom.int8_linear (the namespace is defined with paged_attention)
TORCH_LIBRARY_FRAGMENT(loom, m) { m.def("int8_linear(Tensor x, Tensor q, Tensor scale, bool q8_0=False) -> Tensor"); }

TORCH_LIBRARY_IMPL(loom, CPU, m) { m.impl("int8_linear", &int8_linear); }
