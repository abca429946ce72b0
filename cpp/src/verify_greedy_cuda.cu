// CUDA verify_greedy: one block per request walks its tree from the root; at each visited node u
// the block reads only row u of the logits once and reduces argmax over V (NaN largest, ties ->
// lowest id, as torch.argmax), then looks for the first child of u carrying that token.
//
// Invalid request (num_nodes[b] outside [1, N], parents not topological / out of range, a token of
// nodes 1..n-1 outside [0, V), or an accepted path longer than max_depth + 1 nodes):
// accepted_len[b] = 0, accepted_nodes[b, :] = -1 and bonus_token[b] = -1.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda_common.cuh"

namespace trtspec {
namespace cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kUnroll = 4;

__device__ __forceinline__ float toFloat(float x) { return x; }
__device__ __forceinline__ float toFloat(__half x) { return __half2float(x); }
__device__ __forceinline__ float toFloat(__nv_bfloat16 x) { return __bfloat162float(x); }

// Argmax over this thread's share of one row. The 16-byte-aligned body of the row is read with
// 16-byte vector loads, kUnroll of them in flight per thread (enough bytes in flight to approach
// the memory bandwidth with one block per request); the unaligned head and the tail are read
// element by element. The combine is a total order, so the share's order does not matter.
template <typename T>
__device__ detail::ArgMax rowArgMax(const T* __restrict__ row, int32_t vocab) {
    constexpr int32_t kPerVector = 16 / sizeof(T);
    const detail::ArgMaxOp op;
    detail::ArgMax best{-INFINITY, INT32_MAX};
    const uintptr_t address = reinterpret_cast<uintptr_t>(row);
    int32_t head = static_cast<int32_t>(((16u - (address & 15u)) & 15u) / sizeof(T));
    if (head > vocab) head = vocab;
    for (int32_t v = threadIdx.x; v < head; v += kThreads) best = op(best, detail::ArgMax{toFloat(row[v]), v});

    const int32_t vectors = (vocab - head) / kPerVector;
    const uint4* body = reinterpret_cast<const uint4*>(row + head);
    auto consume = [&](const uint4& w, int32_t first) {
        T x[kPerVector];
        memcpy(x, &w, sizeof w);
#pragma unroll
        for (int32_t j = 0; j < kPerVector; ++j) best = op(best, detail::ArgMax{toFloat(x[j]), first + j});
    };
    int32_t i = threadIdx.x;
    for (; i + (kUnroll - 1) * kThreads < vectors; i += kUnroll * kThreads) {
        uint4 w[kUnroll];
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) w[k] = body[i + k * kThreads];
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) consume(w[k], head + (i + k * kThreads) * kPerVector);
    }
    for (; i < vectors; i += kThreads) consume(body[i], head + i * kPerVector);

    for (int32_t v = head + vectors * kPerVector + threadIdx.x; v < vocab; v += kThreads)
        best = op(best, detail::ArgMax{toFloat(row[v]), v});
    return best;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    verifyGreedyKernel(const int64_t* __restrict__ tokens, const int32_t* __restrict__ parents,
                       const T* __restrict__ logits, const int32_t* __restrict__ numNodes, int32_t N, int32_t vocab,
                       int32_t L, int32_t* __restrict__ acceptedLen, int32_t* __restrict__ acceptedNodes,
                       int64_t* __restrict__ bonusToken) {
    using B = detail::Block<kThreads>;
    extern __shared__ int32_t sParents[];  // [N]
    __shared__ typename B::Shared s;
    const int32_t b = blockIdx.x;
    const int64_t* tok = tokens + static_cast<size_t>(b) * N;
    int32_t* outNodes = acceptedNodes + static_cast<size_t>(b) * L;
    const int32_t n = numNodes != nullptr ? numNodes[b] : N;
    const bool nOk = n >= 1 && n <= N;
    bool valid = detail::loadTree<kThreads>(parents + static_cast<size_t>(b) * N, tok, nOk ? n : 0, vocab, sParents) &&
                 nOk;

    int32_t u = 0, len = 0, t = 0;
    if (valid) {
        if (threadIdx.x == 0) outNodes[0] = 0;
        while (true) {
            const T* row = logits + (static_cast<size_t>(b) * N + u) * static_cast<size_t>(vocab);
            t = B::argmax(rowArgMax(row, vocab), s).index;
            // first child of u whose token is t
            int32_t match = INT32_MAX;
            for (int32_t c = u + 1 + static_cast<int32_t>(threadIdx.x); c < n; c += kThreads) {
                if (sParents[c] == u && tok[c] == t) {
                    match = c;
                    break;
                }
            }
            match = B::min(match, s);
            if (match == INT32_MAX) break;
            if (len + 1 >= L) {  // the accepted path does not fit in max_depth + 1 entries
                valid = false;
                break;
            }
            ++len;
            u = match;
            if (threadIdx.x == 0) outNodes[len] = u;
        }
    }
    __syncthreads();  // order thread 0's path writes before the fills below
    if (!valid) {
        for (int32_t i = threadIdx.x; i < L; i += kThreads) outNodes[i] = -1;
        if (threadIdx.x == 0) {
            acceptedLen[b] = 0;
            bonusToken[b] = -1;
        }
        return;
    }
    for (int32_t i = len + 1 + threadIdx.x; i < L; i += kThreads) outNodes[i] = -1;
    if (threadIdx.x == 0) {
        acceptedLen[b] = len;
        bonusToken[b] = t;
    }
}

template <typename T>
Status launch(const int64_t* tokens, const int32_t* parents, const void* logits, const int32_t* numNodes, int32_t batch,
              int32_t nodes, int32_t vocab, int32_t L, int32_t* acceptedLen, int32_t* acceptedNodes,
              int64_t* bonusToken, cudaStream_t stream) {
    const size_t smem = sizeof(int32_t) * static_cast<size_t>(nodes);
    verifyGreedyKernel<T><<<batch, kThreads, smem, stream>>>(tokens, parents, static_cast<const T*>(logits), numNodes,
                                                             nodes, vocab, L, acceptedLen, acceptedNodes, bonusToken);
    return detail::checkLaunch();
}

}  // namespace

Status verifyGreedy(const int64_t* tokens, const int32_t* parents, const void* logits, DType dtype,
                    const int32_t* numNodes, int32_t batch, int32_t nodes, int64_t vocab, int32_t maxDepth,
                    int32_t* acceptedLen, int32_t* acceptedNodes, int64_t* bonusToken, cudaStream_t stream) {
    if (batch < 0 || batch > kMaxBatch || nodes < 1 || nodes > kMaxNodes || vocab < 1 || vocab > INT32_MAX ||
        maxDepth < 0 || maxDepth >= kMaxNodes)
        return Status::kInvalidArgument;
    if (batch == 0) return Status::kSuccess;
    if (!tokens || !parents || !logits || !acceptedLen || !acceptedNodes || !bonusToken) return Status::kInvalidArgument;
    const int32_t V = static_cast<int32_t>(vocab), L = maxDepth + 1;
    switch (dtype) {
        case DType::kFloat32:
            return launch<float>(tokens, parents, logits, numNodes, batch, nodes, V, L, acceptedLen, acceptedNodes,
                                 bonusToken, stream);
        case DType::kFloat16:
            return launch<__half>(tokens, parents, logits, numNodes, batch, nodes, V, L, acceptedLen, acceptedNodes,
                                  bonusToken, stream);
        case DType::kBFloat16:
            return launch<__nv_bfloat16>(tokens, parents, logits, numNodes, batch, nodes, V, L, acceptedLen,
                                         acceptedNodes, bonusToken, stream);
    }
    return Status::kInvalidArgument;
}

}  // namespace cuda
}  // namespace trtspec
