// Internal helpers shared by the CPU launchers (cpp/src/*.cpp). Torch-free; not installed.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "trtspec/kernels.h"
#include "trtspec/status.h"

namespace trtspec {
namespace detail {

// ---- half / bfloat16 -> float (exact; used by tests and by generic code paths) -------------
inline float bitsToFloat(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

inline float bf16ToFloat(uint16_t h) { return bitsToFloat(static_cast<uint32_t>(h) << 16); }

inline float halfToFloat(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu;
    uint32_t man = h & 0x3FFu;
    if (exp == 0x1Fu) return bitsToFloat(sign | 0x7F800000u | (man << 13));  // Inf / NaN
    if (exp == 0) {
        if (man == 0) return bitsToFloat(sign);  // signed zero
        // subnormal: value = man * 2^-24, exactly representable in float
        exp = 127 - 15 + 1;
        while ((man & 0x400u) == 0) {
            man <<= 1;
            --exp;
        }
        man &= 0x3FFu;
        return bitsToFloat(sign | (exp << 23) | (man << 13));
    }
    return bitsToFloat(sign | ((exp + 127 - 15) << 23) | (man << 13));
}

// ---- checks ---------------------------------------------------------------------------------
// A probability entry is valid iff finite and >= 0 (NaN fails both comparisons).
// Bitwise, not short-circuit: loops that accumulate it stay branch-free and vectorise.
inline bool badProb(float v) {
    return static_cast<bool>(static_cast<unsigned>(!(v >= 0.0f)) | static_cast<unsigned>(v > 3.4028234663852886e38f));
}

// Validate request b's tree: 1 <= n <= N, parents[0] == -1, 0 <= parents[i] < i for i < n.
// Fills firstChild/nextSibling (size >= n) and returns the tree depth through *maxDepthOut.
inline Status buildTree(const int32_t* parents, int32_t n, int32_t* firstChild, int32_t* nextSibling,
                        int32_t* lastChild, int32_t* depth, int32_t* maxDepthOut) {
    if (parents[0] != -1) return Status::kInvalidTree;
    int32_t deepest = 0;
    for (int32_t i = 0; i < n; ++i) {
        firstChild[i] = -1;
        nextSibling[i] = -1;
        lastChild[i] = -1;
    }
    depth[0] = 0;
    for (int32_t i = 1; i < n; ++i) {
        const int32_t p = parents[i];
        if (p < 0 || p >= i) return Status::kInvalidTree;
        depth[i] = depth[p] + 1;
        deepest = std::max(deepest, depth[i]);
        if (firstChild[p] < 0) {
            firstChild[p] = i;
        } else {
            nextSibling[lastChild[p]] = i;
        }
        lastChild[p] = i;
    }
    *maxDepthOut = deepest;
    return Status::kSuccess;
}

struct TreeScratch {
    std::vector<int32_t> firstChild, nextSibling, lastChild, depth;
    explicit TreeScratch(int32_t n) : firstChild(n), nextSibling(n), lastChild(n), depth(n) {}
};

// Resolve num_nodes for request b (N when numNodes is null); kInvalidTree when out of [1, N].
inline Status requestNodes(const int32_t* numNodes, int32_t b, int32_t nodes, int32_t* n) {
    *n = numNodes ? numNodes[b] : nodes;
    return (*n >= 1 && *n <= nodes) ? Status::kSuccess : Status::kInvalidTree;
}

// ---- sampling (bit-identical to reference._sample) ------------------------------------------
// Sequential float64 sum of float32 weights, as torch.cumsum(w.double(), 0)[-1].
inline double seqSum(const float* w, int64_t v) {
    double s = 0.0;
    for (int64_t i = 0; i < v; ++i) s += static_cast<double>(w[i]);
    return s;
}

// seqSum that also checks every entry; false if one is NaN, Inf or negative.
inline bool checkedSum(const float* w, int64_t v, double* total) {
    double s = 0.0;
    unsigned bad = 0;
    for (int64_t i = 0; i < v; ++i) {
        bad |= static_cast<unsigned>(badProb(w[i]));
        s += static_cast<double>(w[i]);
    }
    *total = s;
    return !bad;
}

// Inverse-CDF sample from non-negative float32 weights w[0..v) with uniform u, as
// reference._sample: the CDF is the sequential float64 prefix sum (stored in cdf[0..v)); the
// sample is the first index whose prefix sum exceeds u * total (binary search: the prefix sums
// never decrease), else the last index with positive weight. Returns -1 if an entry is invalid
// and -2 if no weight is positive.
inline int64_t sampleRow(const float* w, int64_t v, double u, double* cdf) {
    double s = 0.0;
    unsigned bad = 0;
    for (int64_t i = 0; i < v; ++i) {
        bad |= static_cast<unsigned>(badProb(w[i]));
        s += static_cast<double>(w[i]);
        cdf[i] = s;
    }
    if (bad) return -1;
    if (!(s > 0.0)) return -2;
    const double target = u * s;
    int64_t lo = 0, hi = v;  // first index in [lo, hi) with cdf > target; hi = none
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (cdf[mid] > target) hi = mid;
        else lo = mid + 1;
    }
    if (lo < v) return lo;
    for (int64_t i = v - 1; i >= 0; --i)
        if (w[i] > 0.0f) return i;
    return -2;  // unreachable when s > 0
}

// ---- batch parallelism ----------------------------------------------------------------------
// Threads to use for `work` scalar operations over `batch` requests: 1 below ~1M operations;
// at most hardware_concurrency, or TRTSPEC_NUM_THREADS when set.
inline int numThreads(int32_t batch, double work) {
    int hw = static_cast<int>(std::thread::hardware_concurrency());
    if (const char* env = std::getenv("TRTSPEC_NUM_THREADS")) hw = std::atoi(env);
    hw = std::max(1, std::min(hw, 64));
    const int byWork = static_cast<int>(work / (1 << 20)) + 1;
    return std::max(1, std::min({hw, byWork, static_cast<int>(batch)}));
}

// Run fn(b0, b1) -> Status over [0, batch) in contiguous chunks on `threads` threads; returns
// the status of the lowest-index failing chunk (each chunk stops at its first failure).
template <typename Fn>
Status parallelFor(int32_t batch, int threads, Fn fn) {
    if (batch <= 0) return Status::kSuccess;
    if (threads <= 1) return fn(0, batch);
    std::vector<Status> results(threads, Status::kSuccess);
    std::vector<std::thread> pool;
    const int32_t chunk = (batch + threads - 1) / threads;
    for (int t = 0; t < threads; ++t) {
        const int32_t b0 = t * chunk, b1 = std::min(batch, b0 + chunk);
        if (b0 >= b1) break;
        if (t == threads - 1 || b1 == batch) {
            results[t] = fn(b0, b1);  // the calling thread takes the last chunk
        } else {
            pool.emplace_back([&results, t, b0, b1, &fn] { results[t] = fn(b0, b1); });
        }
    }
    for (auto& th : pool) th.join();
    for (Status s : results)
        if (s != Status::kSuccess) return s;
    return Status::kSuccess;
}

}  // namespace detail
}  // namespace trtspec
