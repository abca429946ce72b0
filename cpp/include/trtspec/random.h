// Counter-based uniform random numbers, bit-identical to trtspec/reference.py::uniform.
// Draw j at node (chain position) `node` of a request's stream (seed, offset):
// u = (mix(seed ^ mix(offset ^ mix(node ^ mix(j)))) >> 11) * 2^-53, where mix is the SplitMix64
// finaliser (Steele, Lea, Flood 2014). Stateless, so CPU and CUDA agree; keyed by the request's
// own stream and tree, never by its batch index. The verifiers test a node with j = 0 and draw a
// bonus at it with j = 1.
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

TRTSPEC_HD double uniform(uint64_t seed, uint64_t offset, uint64_t node, uint64_t j) {
    uint64_t z = mix64(seed ^ mix64(offset ^ mix64(node ^ mix64(j))));
    return static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);  // 2^53
}

}  // namespace trtspec
