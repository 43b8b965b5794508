// int8 weight-only product for a few rows of activations (decode steps).
// Loom's own kernel: see runtime/kernels/__init__.py (cpu_int8_linear) for why and what it measured.
//
// y[m, n] = scale[n] * sum_k x[m, k] * q[n, k], x float32 [M, K], q int8 [N, K] (row-major), scale bfloat16
// [N] (Int8Linear's own buffer, as aten::_weight_int8pack_mm takes it).  Every row of x is one dot product
// per output, the same loop whatever M is, so a row's result does not depend on the rows beside it
// (a request's output does not change with the batch it is decoded in).
// Each weight row is read once as int8 (a quarter of float32's bytes) and widened in registers; the
// products and the sum are float32 (no bfloat16 rounding of x, unlike aten::_weight_int8pack_mm's fast
// path); with AVX-512 a row's sum runs in four independent vector accumulators (one chain of FMAs would bound
// the loop by FMA latency: 2x slower at 2 threads).  Rows are split over at::parallel_for
// (torch.set_num_threads).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cstdint>

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

static at::Tensor int8_linear(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scale) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous(),
              "int8_linear: x must be a contiguous float32 [M, K] tensor");
  TORCH_CHECK(q.dim() == 2 && q.size(1) == x.size(1) && q.scalar_type() == at::kChar && q.is_contiguous(),
              "int8_linear: q must be a contiguous int8 [N, K] tensor");
  TORCH_CHECK(scale.dim() == 1 && scale.size(0) == q.size(0) && scale.scalar_type() == at::kBFloat16 &&
                  scale.is_contiguous(),
              "int8_linear: scale must be a contiguous bfloat16 [N] tensor");
  const int64_t M = x.size(0), K = x.size(1), N = q.size(0);
  at::Tensor y = at::empty({M, N}, x.options());
  const float* xp = x.data_ptr<float>();
  const int8_t* qp = q.data_ptr<int8_t>();
  const c10::BFloat16* sp = scale.data_ptr<c10::BFloat16>();
  float* yp = y.data_ptr<float>();
  at::parallel_for(0, N, 256, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {  // one weight row, from L1 for every row of x
      const float s = static_cast<float>(sp[n]);
      for (int64_t m = 0; m < M; ++m) yp[m * N + n] = dot_i8(xp + m * K, qp + n * K, K) * s;
    }
  });
  return y;
}

// torch.ops.loom.int8_linear (the namespace is defined with paged_attention)
TORCH_LIBRARY_FRAGMENT(loom, m) { m.def("int8_linear(Tensor x, Tensor q, Tensor scale) -> Tensor"); }

TORCH_LIBRARY_IMPL(loom, CPU, m) { m.impl("int8_linear", &int8_linear); }
