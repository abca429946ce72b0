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

#if defined(__SSE2__)
#include <emmintrin.h>
#define TRTSPEC_SSE2 1
#endif

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

// Token ids tok[0..count) in [0, vocab)? (int32 or int64 ids)
template <typename Token>
inline bool tokensInVocab(const Token* tok, int32_t count, int64_t vocab) {
    for (int32_t i = 0; i < count; ++i)
        if (tok[i] < 0 || static_cast<int64_t>(tok[i]) >= vocab) return false;
    return true;
}

// Start request b of a tree verification over n nodes (parentsRow = its parents[0..N)): clear its
// outputs (path -1, len 0, bonus 0), then check the tree (topological, depth <= maxDepth). On
// success `tree` holds the child lists.
inline Status beginTree(const int32_t* parentsRow, int32_t n, int32_t b, int32_t maxDepth, TreeScratch& tree,
                        int32_t* acceptedLen, int32_t* acceptedNodes, int64_t* bonusToken) {
    const int64_t width = static_cast<int64_t>(maxDepth) + 1;
    int32_t* path = acceptedNodes + b * width;
    std::fill(path, path + width, -1);
    acceptedLen[b] = 0;
    bonusToken[b] = 0;
    int32_t deepest = 0;
    const Status s = buildTree(parentsRow, n, tree.firstChild.data(), tree.nextSibling.data(), tree.lastChild.data(),
                               tree.depth.data(), &deepest);
    if (s != Status::kSuccess) return s;
    return deepest > maxDepth ? Status::kTreeTooDeep : Status::kSuccess;
}

// beginTree for verify_greedy's node layout: num_nodes, then the token ids of nodes 1..n-1
// (tokens [B,N], node i's token at column i). *n receives the request's node count.
inline Status beginTreeRequest(const int32_t* numNodes, const int32_t* parents, const int64_t* tokens, int32_t b,
                               int32_t nodes, int64_t vocab, int32_t maxDepth, TreeScratch& tree,
                               int32_t* acceptedLen, int32_t* acceptedNodes, int64_t* bonusToken, int32_t* n) {
    const int64_t width = static_cast<int64_t>(maxDepth) + 1;
    std::fill(acceptedNodes + b * width, acceptedNodes + (b + 1) * width, -1);
    acceptedLen[b] = 0;
    bonusToken[b] = 0;
    Status s = requestNodes(numNodes, b, nodes, n);
    if (s != Status::kSuccess) return s;
    s = beginTree(parents + static_cast<int64_t>(b) * nodes, *n, b, maxDepth, tree, acceptedLen, acceptedNodes,
                  bonusToken);
    if (s != Status::kSuccess) return s;
    return tokensInVocab(tokens + static_cast<int64_t>(b) * nodes + 1, *n - 1, vocab) ? Status::kSuccess
                                                                                      : Status::kInvalidToken;
}

// Drafts request b uses (D when draftLens is null); kInvalidDraftLen when out of [0, D].
inline Status requestDrafts(const int32_t* draftLens, int32_t b, int32_t draftLen, int32_t* d) {
    *d = draftLens ? draftLens[b] : draftLen;
    return (*d >= 0 && *d <= draftLen) ? Status::kSuccess : Status::kInvalidDraftLen;
}

// ---- row passes (bit-identical to the reference's torch ops) -------------------------------
// The elementwise passes use SSE2 where available (the same IEEE operations as the scalar code,
// element by element, so results are identical); the float64 sums are sequential chains, as
// torch.cumsum on CPU, kept in their own loops so nothing else waits on them.

// Sequential float64 sum of float32 weights, as torch.cumsum(w.double(), 0)[-1].
inline double seqSum(const float* w, int64_t v) {
    double s = 0.0;
    for (int64_t i = 0; i < v; ++i) s += static_cast<double>(w[i]);
    return s;
}

// True if any of w[0..v) is NaN, Inf or negative.
inline bool anyBad(const float* w, int64_t v) {
    int64_t i = 0;
    unsigned bad = 0;
#ifdef TRTSPEC_SSE2
    const __m128 zero = _mm_setzero_ps(), big = _mm_set1_ps(3.4028234663852886e38f);
    __m128 acc = _mm_setzero_ps();
    for (; i + 4 <= v; i += 4) {
        const __m128 x = _mm_loadu_ps(w + i);
        acc = _mm_or_ps(acc, _mm_or_ps(_mm_cmpnge_ps(x, zero), _mm_cmpgt_ps(x, big)));
    }
    bad = static_cast<unsigned>(_mm_movemask_ps(acc));
#endif
    for (; i < v; ++i) bad |= static_cast<unsigned>(badProb(w[i]));
    return bad != 0;
}

// dst = max(p - q, 0) in float32 (dst may alias p). Returns true if p or q has an invalid entry.
inline bool residualF32(const float* p, const float* q, float* dst, int64_t v) {
    int64_t i = 0;
    unsigned bad = 0;
#ifdef TRTSPEC_SSE2
    const __m128 zero = _mm_setzero_ps(), big = _mm_set1_ps(3.4028234663852886e38f);
    __m128 acc = _mm_setzero_ps();
    for (; i + 4 <= v; i += 4) {
        const __m128 a = _mm_loadu_ps(p + i), b = _mm_loadu_ps(q + i);
        acc = _mm_or_ps(acc, _mm_or_ps(_mm_cmpnge_ps(a, zero), _mm_cmpgt_ps(a, big)));
        acc = _mm_or_ps(acc, _mm_or_ps(_mm_cmpnge_ps(b, zero), _mm_cmpgt_ps(b, big)));
        _mm_storeu_ps(dst + i, _mm_max_ps(_mm_sub_ps(a, b), zero));
    }
    bad = static_cast<unsigned>(_mm_movemask_ps(acc));
#endif
    for (; i < v; ++i) {
        bad |= static_cast<unsigned>(badProb(p[i])) | static_cast<unsigned>(badProb(q[i]));
        const float d = p[i] - q[i];
        dst[i] = d < 0.0f ? 0.0f : d;
    }
    return bad != 0;
}

// dst = float32(max(w * p - q, 0)) computed in float64. Returns true on an invalid entry.
inline bool residualF64(const float* p, const float* q, double w, float* dst, int64_t v) {
    int64_t i = 0;
    unsigned bad = 0;
#ifdef TRTSPEC_SSE2
    const __m128 zero = _mm_setzero_ps(), big = _mm_set1_ps(3.4028234663852886e38f);
    const __m128d wv = _mm_set1_pd(w), zerod = _mm_setzero_pd();
    __m128 acc = _mm_setzero_ps();
    for (; i + 4 <= v; i += 4) {
        const __m128 a = _mm_loadu_ps(p + i), b = _mm_loadu_ps(q + i);
        acc = _mm_or_ps(acc, _mm_or_ps(_mm_cmpnge_ps(a, zero), _mm_cmpgt_ps(a, big)));
        acc = _mm_or_ps(acc, _mm_or_ps(_mm_cmpnge_ps(b, zero), _mm_cmpgt_ps(b, big)));
        const __m128d lo = _mm_max_pd(_mm_sub_pd(_mm_mul_pd(wv, _mm_cvtps_pd(a)), _mm_cvtps_pd(b)), zerod);
        const __m128d hi = _mm_max_pd(
            _mm_sub_pd(_mm_mul_pd(wv, _mm_cvtps_pd(_mm_movehl_ps(a, a))), _mm_cvtps_pd(_mm_movehl_ps(b, b))), zerod);
        _mm_storeu_ps(dst + i, _mm_movelh_ps(_mm_cvtpd_ps(lo), _mm_cvtpd_ps(hi)));
    }
    bad = static_cast<unsigned>(_mm_movemask_ps(acc));
#endif
    for (; i < v; ++i) {
        bad |= static_cast<unsigned>(badProb(p[i])) | static_cast<unsigned>(badProb(q[i]));
        const double d = w * static_cast<double>(p[i]) - static_cast<double>(q[i]);
        dst[i] = static_cast<float>(d < 0.0 ? 0.0 : d);
    }
    return bad != 0;
}

// dst = float32(float64(src) / total) (dst may alias src).
inline void divideInto(const float* src, float* dst, int64_t v, double total) {
    int64_t i = 0;
#ifdef TRTSPEC_SSE2
    const __m128d t = _mm_set1_pd(total);
    for (; i + 4 <= v; i += 4) {
        const __m128 a = _mm_loadu_ps(src + i);
        const __m128d lo = _mm_div_pd(_mm_cvtps_pd(a), t);
        const __m128d hi = _mm_div_pd(_mm_cvtps_pd(_mm_movehl_ps(a, a)), t);
        _mm_storeu_ps(dst + i, _mm_movelh_ps(_mm_cvtpd_ps(lo), _mm_cvtpd_ps(hi)));
    }
#endif
    for (; i < v; ++i) dst[i] = static_cast<float>(static_cast<double>(src[i]) / total);
}

// Float64 sum of non-negative floats in any order (SIMD, several chains). Like the sequential
// sum, it is within n * 2^-53 * (the exact sum) of the exact sum (n = v terms).
inline double fastSum(const float* w, int64_t v) {
    int64_t i = 0;
    double s = 0.0;
#ifdef TRTSPEC_SSE2
    __m128d s0 = _mm_setzero_pd(), s1 = _mm_setzero_pd(), s2 = _mm_setzero_pd(), s3 = _mm_setzero_pd();
    for (; i + 8 <= v; i += 8) {
        const __m128 a = _mm_loadu_ps(w + i), b = _mm_loadu_ps(w + i + 4);
        s0 = _mm_add_pd(s0, _mm_cvtps_pd(a));
        s1 = _mm_add_pd(s1, _mm_cvtps_pd(_mm_movehl_ps(a, a)));
        s2 = _mm_add_pd(s2, _mm_cvtps_pd(b));
        s3 = _mm_add_pd(s3, _mm_cvtps_pd(_mm_movehl_ps(b, b)));
    }
    double lanes[2];
    _mm_storeu_pd(lanes, _mm_add_pd(_mm_add_pd(s0, s1), _mm_add_pd(s2, s3)));
    s = lanes[0] + lanes[1];
#endif
    for (; i < v; ++i) s += static_cast<double>(w[i]);
    return s;
}

// seqSum that also checks every entry; false if one is NaN, Inf or negative.
inline bool checkedSum(const float* w, int64_t v, double* total) {
    if (anyBad(w, v)) return false;
    *total = seqSum(w, v);
    return true;
}

// Inverse-CDF sample from non-negative float32 weights w[0..v) with uniform u, as
// reference._sample: the CDF is the sequential float64 prefix sum (stored in cdf[0..v)); the
// sample is the first index whose prefix sum exceeds u * total (binary search: the prefix sums
// never decrease), else the last index with positive weight. With check, entries are validated
// first. Returns -1 if an entry is invalid and -2 if no weight is positive.
inline int64_t searchCdf(const float* w, const double* cdf, int64_t v, double u);

inline int64_t sampleRow(const float* w, int64_t v, double u, double* cdf, bool check = true) {
    if (check && anyBad(w, v)) return -1;
    double s = 0.0;
    for (int64_t i = 0; i < v; ++i) {
        s += static_cast<double>(w[i]);
        cdf[i] = s;
    }
    return searchCdf(w, cdf, v, u);
}

// The sampling half of sampleRow, given cdf[0..v) of w already.
inline int64_t searchCdf(const float* w, const double* cdf, int64_t v, double u) {
    const double s = cdf[v - 1];
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
