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
//
// Per block and KV head, the block's keys are transposed once into a small
// [D, block] buffer, so the scores of 16 tokens for one query row are one
// vector accumulated over D (GEMM-style; several rows share each key load)
// when at least kGemmRows rows attend to the block, one dot product per
// (row, token) otherwise (decodes),
// and P.V keeps the output row in registers across the block's tokens.  This
// makes long query chunks (prefill over a cached prefix) as cheap per query as
// decodes, so every request reads the cache in place.
// Only ATen and the op registry are included (not torch/extension.h, the whole C++ frontend and
// pybind11): the first build takes about 7 s instead of 25 s.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace {

constexpr int64_t QT = 8;  // queries per tile: a block's K/V is reused from L1 across them
constexpr int64_t kInlineWork = 2048;  // (query head, token) pairs below which a step stays on one thread
constexpr int64_t kGemmRows = 8;  // rows (query, query head) of one KV head from which the transposed path wins

#if defined(__AVX512F__)
typedef float v16 __attribute__((vector_size(64)));  // GCC vector extension: one AVX-512 register

inline v16 load16(const float* p) { v16 x; __builtin_memcpy(&x, p, sizeof(x)); return x; }
inline void store16(float* p, v16 x) { __builtin_memcpy(p, &x, sizeof(x)); }
inline float hsum(v16 x) {
  float s = 0.f;
  for (int i = 0; i < 16; ++i) s += x[i];
  return s;
}
#else
// Without AVX-512, 16 floats are two native vectors (AVX2's 32 bytes).  A 64-byte GCC vector type on such a CPU
// is lowered piecewise, much of it through memory: decode attention ran at ~150 ns per (query head, token) on
// an AVX2 Zen 3, ten times this pair's cost.
typedef float v8 __attribute__((vector_size(32)));
struct v16 {
  v8 lo, hi;
  v16() : lo(v8{0}), hi(v8{0}) {}
  v16(int zero) : lo(v8{} + static_cast<float>(zero)), hi(lo) {}  // v16{0}
  v16(v8 l, v8 h) : lo(l), hi(h) {}
};
inline v16 operator+(v16 a, v16 b) { return {a.lo + b.lo, a.hi + b.hi}; }
inline v16 operator*(v16 a, v16 b) { return {a.lo * b.lo, a.hi * b.hi}; }
inline v16 operator*(float a, v16 b) { return {a * b.lo, a * b.hi}; }
inline v16 operator*(v16 a, float b) { return {a.lo * b, a.hi * b}; }
inline v16& operator+=(v16& a, v16 b) { a.lo += b.lo; a.hi += b.hi; return a; }
inline v16 load16(const float* p) {
  v16 x;
  __builtin_memcpy(&x.lo, p, sizeof(v8));
  __builtin_memcpy(&x.hi, p + 8, sizeof(v8));
  return x;
}
inline void store16(float* p, v16 x) {
  __builtin_memcpy(p, &x.lo, sizeof(v8));
  __builtin_memcpy(p + 8, &x.hi, sizeof(v8));
}
inline float hsum(v16 x) {
  const v8 s = x.lo + x.hi;
  return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}
#endif

inline float dot(const float* __restrict a, const float* __restrict b, int64_t D) {
  v16 acc = {0};
  int64_t d = 0;
  for (; d + 16 <= D; d += 16) acc += load16(a + d) * load16(b + d);
  float s = hsum(acc);
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

// kt[d * bsp + t] = K[t, d] for the nt tokens of a block (k: head's first row, token stride tok):
// the scores of 16 tokens are then one vector per query row (GEMM-style, no horizontal sums).
inline void transpose_block(float* __restrict kt, const float* __restrict k, int64_t tok, int64_t nt, int64_t D,
                            int64_t bsp) {
  for (int64_t t = 0; t < nt; ++t) {
    const float* kr = k + t * tok;
    for (int64_t d = 0; d < D; ++d) kt[d * bsp + t] = kr[d];
  }
}

// s[r * bsp + c .. c + 16) = scale * q_r . K[c .. c + 16) for RB rows at once (one K vector load feeds RB FMAs).
template <int RB>
inline void qk_rows(const int64_t* rows, const float* qbase, int64_t Hq, int64_t D, const float* __restrict kt,
                    int64_t bsp, int64_t c0, int64_t c1, float scale, float* s) {
  const float* q[RB];
  for (int j = 0; j < RB; ++j) q[j] = qbase + rows[j] * D;  // row r = qi * Hq + hq: q[qi, hq] of the tile
  for (int64_t c = c0; c < c1; c += 16) {
    v16 a[RB];
    for (int j = 0; j < RB; ++j) a[j] = v16{0};
    for (int64_t d = 0; d < D; ++d) {
      const v16 k = load16(kt + d * bsp + c);
      for (int j = 0; j < RB; ++j) a[j] += q[j][d] * k;
    }
    for (int j = 0; j < RB; ++j) store16(s + rows[j] * bsp + c, a[j] * scale);
  }
}

inline void qk_scores(const int64_t* rows, int64_t nr, const float* qbase, int64_t Hq, int64_t D,
                      const float* kt, int64_t bsp, int64_t c0, int64_t c1, float scale, float* s) {
  int64_t i = 0;
  for (; i + 8 <= nr; i += 8) qk_rows<8>(rows + i, qbase, Hq, D, kt, bsp, c0, c1, scale, s);
  for (; i + 4 <= nr; i += 4) qk_rows<4>(rows + i, qbase, Hq, D, kt, bsp, c0, c1, scale, s);
  for (; i < nr; ++i) qk_rows<1>(rows + i, qbase, Hq, D, kt, bsp, c0, c1, scale, s);
}

// acc = acc * corr + sum_{t in [tlo, thi)} p[t] * V[t] (v: head's first row, token stride tok), with the
// row held in registers across the block's tokens when D is a multiple of 16.
inline void pv_accumulate(float* __restrict acc, float corr, const float* __restrict p, int64_t tlo, int64_t thi,
                          const float* __restrict v, int64_t tok, int64_t D) {
  if (D % 16 == 0 && D <= 256) {
    const int64_t nc = D / 16;
    v16 a[16];
    for (int64_t c = 0; c < nc; ++c) a[c] = load16(acc + 16 * c) * corr;
    for (int64_t t = tlo; t < thi; ++t) {
      const float pt = p[t];
      const float* vr = v + t * tok;
      for (int64_t c = 0; c < nc; ++c) a[c] += pt * load16(vr + 16 * c);
    }
    for (int64_t c = 0; c < nc; ++c) store16(acc + 16 * c, a[c]);
    return;
  }
  scale_row(acc, corr, D);
  for (int64_t t = tlo; t < thi; ++t) axpy(acc, p[t], v + t * tok, D);
}

}  // namespace

// q [T, Hq, D]; q_start / q_len / ctx_len [N] int32; block_tables [N, W] int32.
// Returns [T, Hq, D]; rows of q not covered by any sequence are left uninitialised.
at::Tensor paged_attention(at::Tensor q, at::Tensor k_cache, at::Tensor v_cache, at::Tensor q_start,
                              at::Tensor q_len, at::Tensor ctx_len, at::Tensor block_tables,
                              int64_t block_size, double scale_d, int64_t window) {
  TORCH_CHECK(q.scalar_type() == at::kFloat && k_cache.scalar_type() == at::kFloat, "float32 only");
  TORCH_CHECK(q.is_contiguous() && k_cache.is_contiguous() && v_cache.is_contiguous(), "contiguous inputs only");
  const int64_t Hq = q.size(1), D = q.size(2), Hkv = k_cache.size(1), G = Hq / Hkv;
  const int64_t N = q_start.size(0), W = block_tables.size(1);
  auto out = at::empty_like(q);
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

  const int64_t bsp = (block_size + 15) / 16 * 16;  // a block's tokens padded to whole 16-lane vectors

  // A small step (a short context at batch 1) runs on the calling thread: waking a second one took longer than
  // the work saved (one decode of 9 query heads over 64 tokens: 13 us on one thread, 23 us on two; AVX2 Zen 3).
  int64_t work = 0;  // (query tile, query head, token) triples
  for (int64_t n = 0; n < N; ++n) work += cl[n] * ((ql[n] + QT - 1) / QT);
  const int64_t grain = work * Hq < kInlineWork ? std::max<int64_t>(ntask, 1) : 1;

  at::parallel_for(0, ntask, grain, [&](int64_t begin, int64_t end) {
    const int64_t R = QT * Hq;  // rows of a tile: (query, query head)
    std::vector<float> acc(R * D), m(R), l(R), s(R * bsp), kt(D * bsp, 0.f);
    std::vector<int64_t> rows(R), rlo(R), rhi(R);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t ti = task / hsplit;
      const int64_t h0 = (task % hsplit) * hper, h1 = h0 + hper;
      const int64_t n = task_seq[ti], t0 = task_tile[ti];
      const int64_t nq = std::min<int64_t>(QT, ql[n] - t0);
      const int64_t first_pos = cl[n] - ql[n] + t0;
      const int64_t last_pos = first_pos + nq - 1;
      const int64_t lo = window > 0 ? std::max<int64_t>(0, first_pos - window + 1) : 0;
      for (int64_t qi = 0; qi < nq; ++qi)
        for (int64_t hq = h0 * G; hq < h1 * G; ++hq) {
          const int64_t r = qi * Hq + hq;
          std::fill(acc.begin() + r * D, acc.begin() + (r + 1) * D, 0.f);
          m[r] = -INFINITY;
          l[r] = 0.f;
        }
      const float* qbase = qp + (int64_t)(qs[n] + t0) * Hq * D;
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
        for (int64_t h = h0; h < h1; ++h) {
          // the rows (query, query head of KV head h) that see some token of this block
          int64_t nr = 0, c0 = bsp, c1 = 0;
          for (int64_t qi = 0; qi < nq; ++qi) {
            const int64_t pos = first_pos + qi;
            const int64_t tlo = window > 0 ? std::max<int64_t>(0, pos - window + 1 - bstart) : 0;
            const int64_t thi = std::min<int64_t>(nt, pos + 1 - bstart);  // exclusive
            if (thi <= tlo) continue;
            c0 = std::min(c0, tlo / 16 * 16);
            c1 = std::max(c1, thi);
            for (int64_t g = 0; g < G; ++g) {
              rows[nr] = qi * Hq + h * G + g;
              rlo[nr] = tlo;
              rhi[nr] = thi;
              ++nr;
            }
          }
          if (!nr) continue;
          if (nr >= kGemmRows) {  // enough rows share the block's keys: transpose them once
            transpose_block(kt.data(), kb + h * D, tok, nt, D, bsp);
            qk_scores(rows.data(), nr, qbase, Hq, D, kt.data(), bsp, c0, c1, scale, s.data());
          } else {  // decode-like: a few rows, one dot product per (row, token)
            for (int64_t i = 0; i < nr; ++i) {
              const float* qrow = qbase + rows[i] * D;
              float* sr = s.data() + rows[i] * bsp;
              for (int64_t t = rlo[i]; t < rhi[i]; ++t) sr[t] = dot(qrow, kb + t * tok + h * D, D) * scale;
            }
          }
          for (int64_t i = 0; i < nr; ++i) {
            const int64_t r = rows[i], tlo = rlo[i], thi = rhi[i];
            float* sr = s.data() + r * bsp;
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
            pv_accumulate(acc.data() + r * D, corr, sr, tlo, thi, vb + h * D, tok, D);
          }
        }
      }
      for (int64_t qi = 0; qi < nq; ++qi)
        for (int64_t hq = h0 * G; hq < h1 * G; ++hq) {
          const int64_t r = qi * Hq + hq;
          float* o = op + ((int64_t)(qs[n] + t0 + qi) * Hq + hq) * D;
          const float inv = 1.f / l[r];
          for (int64_t d = 0; d < D; ++d) o[d] = acc[r * D + d] * inv;
        }
    }
  });
  return out;
}

// torch.ops.loom.paged_attention (float scale arrives as double, int as int64_t)
TORCH_LIBRARY(loom, m) {
  m.def("paged_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor q_start, Tensor q_len, "
        "Tensor ctx_len, Tensor block_tables, int block_size, float scale, int window) -> Tensor");
}

TORCH_LIBRARY_IMPL(loom, CPU, m) { m.impl("paged_attention", &paged_attention); }
