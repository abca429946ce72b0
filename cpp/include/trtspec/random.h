// Counter-based uniform random numbers, bit-identical to trtspec/reference.py::uniform.
// Draw k of request b: u = (mix(seed ^ mix(offset ^ mix(b ^ mix(k)))) >> 11) * 2^-53, where mix
// is the SplitMix64 finaliser (Steele, Lea, Flood 2014). Stateless, so CPU and CUDA agree.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define TRTSPEC_HD __host__ __device__ __forceinline__
#else
#define TRTSPEC_HD inline
#endif

namespace trtspec {

TRTSPEC_HD uint64_t mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

TRTSPEC_HD double uniform(uint64_t seed, uint64_t offset, uint64_t b, uint64_t k) {
    uint64_t z = mix64(seed ^ mix64(offset ^ mix64(b ^ mix64(k))));
    return static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);  // 2^53
}

}  // namespace trtspec
