// Activation rows rounded to llama.cpp's Q8_0 blocks: 32 values, one float32 scale, int8 codes.
// The integer paths of int8_linear_cpu.cpp and int4_linear_cpu.cpp read their activations so:
// symmetric, scale = max|x| / max_code over the block, codes rounded to nearest (ties to even), a block of
// zeros has scale 0.  max_code is 127 (Q8_0) but for the AVX2 int8 product, which takes 63 (7-bit codes; see
// int8_linear_cpu.cpp).  One owner for that rounding, so both kernels and the tests' reference agree.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace loom {

constexpr int64_t kQ8Block = 32;
constexpr int kQ8MaxCode = 127;  // Q8_0's codes: [-127, 127]
constexpr int kQ7MaxCode = 63;   // 7-bit codes, [-63, 63]: what vpmaddubsw against an unsigned weight byte can take

// x [K] float32 or bfloat16 (K a multiple of 32) -> codes [K] int8 in [-max_code, max_code], scale [K / 32]
// float32 and code_sum [K / 32] (the sum of each block's codes, for the terms a weight's offset or zero point adds).
template <typename T>
inline void quantize_q8_0(const T* __restrict x, int64_t K, int8_t* __restrict codes, float* __restrict scale,
                          int32_t* __restrict code_sum, int max_code = kQ8MaxCode) {
  for (int64_t b = 0; b < K / kQ8Block; ++b) {
    const T* xb = x + b * kQ8Block;
    float amax = 0.f;
    for (int64_t k = 0; k < kQ8Block; ++k) amax = std::max(amax, std::fabs(static_cast<float>(xb[k])));
    const float inv = amax > 0.f ? static_cast<float>(max_code) / amax : 0.f;
    int32_t sum = 0;
    for (int64_t k = 0; k < kQ8Block; ++k) {
      const int32_t v = static_cast<int32_t>(std::nearbyint(static_cast<float>(xb[k]) * inv));
      codes[b * kQ8Block + k] = static_cast<int8_t>(v);
      sum += v;
    }
    scale[b] = amax / static_cast<float>(max_code);
    code_sum[b] = sum;
  }
}

}  // namespace loom
