// Paged attention on the CPU that reads K/V blocks where they lie in the cache
// (no gather into a workspace).  Loom's own kernel: see runtime/kernels/__init__.py.
//
// Layout (runtime/attention.py): k_cache / v_cache are [slots, Hkv, D] float32,
// slot = block * block_size + offset, so one block's tokens are contiguous
// (block_size * Hkv * D floats) and a task reads them as one stream.
//
// A task is (sequence, tile of up to QT queries, range of KV heads).  Query i of
// sequence n sits at position ctx_len[n] - q_len[n] + i and attends to keys at
// positions p with p <= i's position (causal) and, when window > 0,
// p > position - window (transformers' sliding window).  Softmax is computed
// online per block (FlashAttention's rescaling, Dao et al. 2022), in float32.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace {

constexpr int64_t QT = 8;  // queries per tile: a block's K/V is reused from L1 across them

typedef float v16 __attribute__((vector_size(64)));  // GCC vector extension: AVX-512 or 2x AVX2

inline v16 load16(const float* p) { v16 x; __builtin_memcpy(&x, p, sizeof(x)); return x; }
inline void store16(float* p, v16 x) { __builtin_memcpy(p, &x, sizeof(x)); }

inline float dot(const float* __restrict a, const float* __restrict b, int64_t D) {
  v16 acc = {0};
  int64_t d = 0;
  for (; d + 16 <= D; d += 16) acc += load16(a + d) * load16(b + d);
  float s = 0.f;
  for (int i = 0; i < 16; ++i) s += acc[i];
  for (; d < D; ++d) s += a[d] * b[d];
  return s;
}

inline void axpy(float* __restrict y, float a, const float* __restrict x, int64_t D) {
  int64_t d = 0;
  for (; d + 16 <= D; d += 16) store16(y + d, load16(y + d) + a * load16(x + d));
  for (; d < D; ++d) y[d] += a * x[d];
}

inline void scale_row(float* __restrict y, float a, int64_t D) {
  for (int64_t d = 0; d < D; ++d) y[d] *= a;
}

}  // namespace

// q [T, Hq, D]; q_start / q_len / ctx_len [N] int32; block_tables [N, W] int32.
// Returns [T, Hq, D]; rows of q not covered by any sequence are left uninitialised.
torch::Tensor paged_attention(torch::Tensor q, torch::Tensor k_cache, torch::Tensor v_cache, torch::Tensor q_start,
                              torch::Tensor q_len, torch::Tensor ctx_len, torch::Tensor block_tables,
                              int64_t block_size, double scale_d, int64_t window) {
  TORCH_CHECK(q.scalar_type() == at::kFloat && k_cache.scalar_type() == at::kFloat, "float32 only");
  TORCH_CHECK(q.is_contiguous() && k_cache.is_contiguous() && v_cache.is_contiguous(), "contiguous inputs only");
  const int64_t Hq = q.size(1), D = q.size(2), Hkv = k_cache.size(1), G = Hq / Hkv;
  const int64_t N = q_start.size(0), W = block_tables.size(1);
  auto out = torch::empty_like(q);
  const float* qp = q.data_ptr<float>();
  const float* kp = k_cache.data_ptr<float>();
  const float* vp = v_cache.data_ptr<float>();
  const int32_t* qs = q_start.data_ptr<int32_t>();
  const int32_t* ql = q_len.data_ptr<int32_t>();
  const int32_t* cl = ctx_len.data_ptr<int32_t>();
  const int32_t* bt = block_tables.data_ptr<int32_t>();
  float* op = out.data_ptr<float>();
  const float scale = (float)scale_d;
  const int64_t tok = Hkv * D;             // floats per token (all KV heads)
  const int64_t blk_floats = block_size * tok;

  std::vector<int64_t> task_seq, task_tile;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t t = 0; t < ql[n]; t += QT) { task_seq.push_back(n); task_tile.push_back(t); }
  // Few (sequence, tile) tasks (batch 1 decode): split the KV heads too so every thread works.
  const int64_t hsplit = (int64_t)task_seq.size() >= 4 * at::get_num_threads() ? 1 : Hkv;
  const int64_t hper = Hkv / hsplit;
  const int64_t ntask = (int64_t)task_seq.size() * hsplit;

  at::parallel_for(0, ntask, 1, [&](int64_t begin, int64_t end) {
    const int64_t R = QT * Hq;  // rows of a tile: (query, query head)
    std::vector<float> acc(R * D), m(R), l(R), s(R * block_size);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t ti = task / hsplit;
      const int64_t hq0 = (task % hsplit) * hper * G, hq1 = hq0 + hper * G;
      const int64_t n = task_seq[ti], t0 = task_tile[ti];
      const int64_t nq = std::min<int64_t>(QT, ql[n] - t0);
      const int64_t first_pos = cl[n] - ql[n] + t0;
      const int64_t last_pos = first_pos + nq - 1;
      const int64_t lo = window > 0 ? std::max<int64_t>(0, first_pos - window + 1) : 0;
      for (int64_t qi = 0; qi < nq; ++qi)
        for (int64_t hq = hq0; hq < hq1; ++hq) {
          const int64_t r = qi * Hq + hq;
          std::fill(acc.begin() + r * D, acc.begin() + (r + 1) * D, 0.f);
          m[r] = -INFINITY;
          l[r] = 0.f;
        }
      for (int64_t blk = lo / block_size; blk * block_size <= last_pos; ++blk) {
        const int64_t bstart = blk * block_size;
        const int64_t nt = std::min<int64_t>(block_size, last_pos + 1 - bstart);
        const float* kb = kp + (int64_t)bt[n * W + blk] * blk_floats;
        const float* vb = vp + (int64_t)bt[n * W + blk] * blk_floats;
        if ((blk + 1) * block_size <= last_pos) {  // the next block lies at a random address: prefetch it
          const char* nk = (const char*)(kp + (int64_t)bt[n * W + blk + 1] * blk_floats);
          const char* nv = (const char*)(vp + (int64_t)bt[n * W + blk + 1] * blk_floats);
          const int64_t bytes = blk_floats * (int64_t)sizeof(float);
          for (int64_t off = 0; off < bytes; off += 64) {
            __builtin_prefetch(nk + off);
            __builtin_prefetch(nv + off);
          }
        }
        for (int64_t qi = 0; qi < nq; ++qi) {
          const int64_t pos = first_pos + qi;
          const int64_t tlo = window > 0 ? std::max<int64_t>(0, pos - window + 1 - bstart) : 0;
          const int64_t thi = std::min<int64_t>(nt, pos + 1 - bstart);  // exclusive
          if (thi <= tlo) continue;
          const float* qrow = qp + (int64_t)(qs[n] + t0 + qi) * Hq * D;
          for (int64_t t = tlo; t < thi; ++t) {  // token-major: a token's heads are contiguous
            const float* krow = kb + t * tok;
            for (int64_t hq = hq0; hq < hq1; ++hq)
              s[(qi * Hq + hq) * block_size + t] = dot(qrow + hq * D, krow + (hq / G) * D, D) * scale;
          }
          for (int64_t hq = hq0; hq < hq1; ++hq) {
            const int64_t r = qi * Hq + hq;
            float* sr = s.data() + r * block_size;
            float mx = m[r];
            for (int64_t t = tlo; t < thi; ++t) mx = std::max(mx, sr[t]);
            const float corr = std::exp(m[r] - mx);
            float sum = 0.f;
#pragma omp simd reduction(+ : sum)
            for (int64_t t = tlo; t < thi; ++t) {
              sr[t] = std::exp(sr[t] - mx);
              sum += sr[t];
            }
            l[r] = l[r] * corr + sum;
            m[r] = mx;
            scale_row(acc.data() + r * D, corr, D);
          }
          for (int64_t t = tlo; t < thi; ++t) {
            const float* vrow = vb + t * tok;
            for (int64_t hq = hq0; hq < hq1; ++hq) {
              const int64_t r = qi * Hq + hq;
              axpy(acc.data() + r * D, s[r * block_size + t], vrow + (hq / G) * D, D);
            }
          }
        }
      }
      for (int64_t qi = 0; qi < nq; ++qi)
        for (int64_t hq = hq0; hq < hq1; ++hq) {
          const int64_t r = qi * Hq + hq;
          float* o = op + ((int64_t)(qs[n] + t0 + qi) * Hq + hq) * D;
          const float inv = 1.f / l[r];
          for (int64_t d = 0; d < D; ++d) o[d] = acc[r * D + d] * inv;
        }
    }
  });
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("paged_attention", &paged_attention, "Paged attention over the KV cache in place (CPU, float32)");
}
