// Shared device helpers of the CUDA launchers (cpp/src/*_cuda.cu). Not a public header.
//
// Conventions of every CUDA launcher:
//  * work runs on the caller's stream (never the default stream); a failed launch or CUDA call
//    returns Status::kCudaError (the CUDA error itself stays queryable with cudaGetLastError);
//  * sizes are validated on the host (kInvalidArgument) before anything is launched;
//  * data (parents, token ids, num_nodes, accepted lengths) is validated on the device before it
//    is used as an index, so no input makes a kernel read or write out of bounds. A request whose
//    data is invalid gets a deterministic "invalid" verdict instead of a result (see each op);
//    the CPU launchers reject the same inputs with a Status before running.
#pragma once
#include <cuda_runtime.h>

#include <cfloat>
#include <climits>
#include <cstdint>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "trtspec/kernels.h"
#include "trtspec/random.h"

namespace trtspec {
namespace cuda {
namespace detail {

// Launch epilogue: a launch error (bad configuration, no device, ...) becomes kCudaError.
inline Status checkLaunch() {
    return cudaGetLastError() == cudaSuccess ? Status::kSuccess : Status::kCudaError;
}

inline size_t alignUp(size_t bytes, size_t to = 256) { return (bytes + to - 1) / to * to; }

struct MinOp {
    template <typename T>
    __device__ __forceinline__ T operator()(const T& a, const T& b) const { return b < a ? b : a; }
};
struct MaxOp {
    template <typename T>
    __device__ __forceinline__ T operator()(const T& a, const T& b) const { return a < b ? b : a; }
};

// (value, index) pair for argmax with torch.argmax's order: NaN is largest, ties -> lowest index.
struct ArgMax {
    float value;
    int32_t index;
};
struct ArgMaxOp {
    __device__ __forceinline__ ArgMax operator()(const ArgMax& a, const ArgMax& b) const {
        const bool aNan = a.value != a.value, bNan = b.value != b.value;
        if (aNan != bNan) return aNan ? a : b;
        if (aNan || a.value == b.value) return a.index <= b.index ? a : b;
        return a.value > b.value ? a : b;
    }
};

// Block-wide reductions whose result is broadcast to every thread. Each call begins with a
// barrier, so consecutive calls may share one TempStorage; the caller must call them from all
// threads of the block (uniform control flow).
template <int kThreads>
struct Block {
    using ReduceInt = cub::BlockReduce<int32_t, kThreads>;
    using ReduceDouble = cub::BlockReduce<double, kThreads>;
    using ScanDouble = cub::BlockScan<double, kThreads>;
    using ReduceArgMax = cub::BlockReduce<ArgMax, kThreads>;
    struct Shared {
        union {
            typename ReduceInt::TempStorage reduceInt;
            typename ReduceDouble::TempStorage reduceDouble;
            typename ScanDouble::TempStorage scanDouble;
            typename ReduceArgMax::TempStorage reduceArgMax;
        } temp;
        int32_t i32;
        double f64;
        ArgMax argmax;
    };

    static __device__ int32_t min(int32_t v, Shared& s) {
        __syncthreads();
        const int32_t r = ReduceInt(s.temp.reduceInt).Reduce(v, MinOp());
        if (threadIdx.x == 0) s.i32 = r;
        __syncthreads();
        return s.i32;
    }
    static __device__ int32_t max(int32_t v, Shared& s) {
        __syncthreads();
        const int32_t r = ReduceInt(s.temp.reduceInt).Reduce(v, MaxOp());
        if (threadIdx.x == 0) s.i32 = r;
        __syncthreads();
        return s.i32;
    }
    static __device__ double sum(double v, Shared& s) {
        __syncthreads();
        const double r = ReduceDouble(s.temp.reduceDouble).Sum(v);
        if (threadIdx.x == 0) s.f64 = r;
        __syncthreads();
        return s.f64;
    }
    static __device__ ArgMax argmax(ArgMax v, Shared& s) {
        __syncthreads();
        const ArgMax r = ReduceArgMax(s.temp.reduceArgMax).Reduce(v, ArgMaxOp());
        if (threadIdx.x == 0) s.argmax = r;
        __syncthreads();
        return s.argmax;
    }
};

// The smallest child c of u with last < c < n (parents of the request in shared memory), or
// INT32_MAX when there is none. Children are tried in index order, like the reference.
template <int kThreads>
__device__ int32_t nextChild(const int32_t* sParents, int32_t u, int32_t last, int32_t n,
                             typename Block<kThreads>::Shared& s) {
    int32_t best = INT32_MAX;
    for (int32_t c = last + 1 + static_cast<int32_t>(threadIdx.x); c < n; c += kThreads) {
        if (sParents[c] == u) {
            best = c;
            break;  // this thread's later candidates are larger
        }
    }
    return Block<kThreads>::min(best, s);
}

template <typename T>
struct Same {
    using type = T;
};

// Loads parents[0..n) of one request into shared memory and validates the tree (parents[0] == -1,
// 0 <= parents[i] < i) and, when tokens != nullptr, the token of every node i in 1..n-1, at
// tokens[i - tokenShift] (0: a token per node, root included; 1: draft tokens only), in [0, vocab).
// Token (int64_t by default, or int32_t) is named explicitly, never deduced.
// Returns true (on every thread) when the request is valid.
template <int kThreads, typename Token = int64_t>
__device__ bool loadTree(const int32_t* parents, const typename Same<Token>::type* tokens, int32_t n, int64_t vocab,
                         int32_t* sParents, int32_t tokenShift = 0) {
    int bad = 0;
    for (int32_t i = threadIdx.x; i < n; i += kThreads) {
        const int32_t p = parents[i];
        sParents[i] = p;
        if (i == 0 ? p != -1 : (p < 0 || p >= i)) bad = 1;
        if (tokens != nullptr && i > 0) {
            const int64_t t = static_cast<int64_t>(tokens[i - tokenShift]);
            if (t < 0 || t >= vocab) bad = 1;
        }
    }
    return __syncthreads_or(bad) == 0;
}

// Inverse-CDF sample of the reference (_sample): the first index whose float64 prefix sum of the
// unnormalised non-negative weights exceeds u * total; if rounding leaves none, the last index
// with positive weight; -1 if no weight is positive. `weight(v)` returns float weight v (the same
// value every time it is called). Block-parallel: the float64 sums are associated differently from
// the reference's sequential sum, so a draw can differ from the CPU's only where the prefix sum
// lands within rounding of u * total.
template <int kThreads, int kItems, typename WeightFn>
__device__ int64_t sample(WeightFn weight, int32_t vocab, double u, typename Block<kThreads>::Shared& s) {
    using B = Block<kThreads>;
    double local = 0.0;
    #pragma unroll 4
    for (int32_t v = threadIdx.x; v < vocab; v += kThreads) local += static_cast<double>(weight(v));
    const double total = B::sum(local, s);
    const double target = __dmul_rn(u, total);

    constexpr int32_t kTile = kThreads * kItems;
    double carry = 0.0;
    for (int32_t base = 0; base < vocab; base += kTile) {
        const int32_t first = base + static_cast<int32_t>(threadIdx.x) * kItems;
        float w[kItems];
        double mine = 0.0;
#pragma unroll
        for (int k = 0; k < kItems; ++k) {
            w[k] = first + k < vocab ? weight(first + k) : 0.0f;
            mine += static_cast<double>(w[k]);
        }
        double exclusive, aggregate;
        __syncthreads();
        typename B::ScanDouble(s.temp.scanDouble).ExclusiveSum(mine, exclusive, aggregate);
        double cdf = carry + exclusive;
        int32_t found = INT32_MAX;
#pragma unroll
        for (int k = 0; k < kItems; ++k) {
            cdf += static_cast<double>(w[k]);
            if (found == INT32_MAX && first + k < vocab && cdf > target) found = first + k;
        }
        found = B::min(found, s);
        if (found != INT32_MAX) return found;
        carry += aggregate;
    }
    int32_t last = -1;
    #pragma unroll 4
    for (int32_t v = threadIdx.x; v < vocab; v += kThreads)
        if (weight(v) > 0.0f) last = v;
    return B::max(last, s);
}

}  // namespace detail
}  // namespace cuda
}  // namespace trtspec
