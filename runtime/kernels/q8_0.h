// Activation rows rounded to llama.cpp's Q8_0 blocks: 32 values, one float32 scale, int8 codes.
// The integer (vpdpbusd) paths of int8_linear_cpu.cpp and int4_linear_cpu.cpp read their activations so:
// symmetric, scale = max|x| / 127 over the block, codes rounded to nearest (ties to even), a block of
// zeros has scale 0.  One owner for that rounding, so both kernels and the tests' reference agree.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace loom {

constexpr int64_t kQ8Block = 32;

// x [K] float32 or bfloat16 (K a multiple of 32) -> codes [K] int8, scale [K / 32] float32 and code_sum [K / 32]
// (the sum of each block's codes, for the terms a weight's offset or zero point adds).
template <typename T>
inline void quantize_q8_0(const T* __restrict x, int64_t K, int8_t* __restrict codes, float* __restrict scale,
                          int32_t* __restrict code_sum) {
  for (int64_t b = 0; b < K / kQ8Block; ++b) {
    const T* xb = x + b * kQ8Block;
    float amax = 0.f;
    for (int64_t k = 0; k < kQ8Block; ++k) amax = std::max(amax, std::fabs(static_cast<float>(xb[k])));
    const float inv = amax > 0.f ? 127.f / amax : 0.f;
    int32_t sum = 0;
    for (int64_t k = 0; k < kQ8Block; ++k) {
      const int32_t v = static_cast<int32_t>(std::nearbyint(static_cast<float>(xb[k]) * inv));
      codes[b * kQ8Block + k] = static_cast<int8_t>(v);
      sum += v;
    }
    scale[b] = amax / 127.f;
    code_sum[b] = sum;
  }
}

}  // namespace loom
