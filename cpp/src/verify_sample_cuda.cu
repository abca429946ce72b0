// CUDA verify_sample: multi-draft recursive rejection sampling, one block per request.
//
// The residual target distribution p (after a rejection) and, with siblings_without_replacement,
// the renormalised draft distribution q live in the workspace: two float rows of V per request.
// Point decisions (uniform * q(x) < p(x)) and elementwise residuals are bit-identical to the
// reference; the float64 normalising sums are block reductions, so they can differ from the CPU's
// sequential sums in the last bits (exactly equal when every sum is exact, e.g. dyadic inputs).
//
// Invalid request (num_nodes[b] outside [1, N], parents not topological / out of range, a token of
// nodes 1..n-1 outside [0, V), or an accepted path longer than max_depth + 1 nodes):
// accepted_len[b] = 0, accepted_nodes[b, :] = -1 and bonus_token[b] = -1. The CPU launcher
// rejects a tree deeper than max_depth; this kernel only flags a request whose accepted path does
// not fit. If rounding empties the residual the bonus is drawn from the last accepted node's
// target row (as on the CPU); if that row has no positive entry either (invalid probabilities),
// the bonus is -1 and the accepted path is kept.
#include "cuda_common.cuh"
#include "trtspec/kernels.h"

namespace trtspec {
namespace cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kItems = 4;

size_t rowBytes(int64_t vocab) { return detail::alignUp(sizeof(float) * static_cast<size_t>(vocab)); }

__global__ void __launch_bounds__(kThreads, 1)
    verifySampleKernel(const int64_t* __restrict__ tokens, const int32_t* __restrict__ parents,
                       const float* __restrict__ targetProbs, const float* __restrict__ draftProbs,
                       const int32_t* __restrict__ numNodes, int32_t N, int32_t vocab, int32_t L, uint64_t seedValue,
                       uint64_t offsetValue, const int64_t* __restrict__ seedOffset, bool withoutReplacement, float* workspace, size_t rowFloats,
                       int32_t* __restrict__ acceptedLen, int32_t* __restrict__ acceptedNodes,
                       int64_t* __restrict__ bonusToken) {
    using B = detail::Block<kThreads>;
    extern __shared__ int32_t sParents[];  // [N]
    __shared__ typename B::Shared s;
    const int32_t b = blockIdx.x;
    const uint64_t seed = seedOffset != nullptr ? static_cast<uint64_t>(seedOffset[0]) : seedValue;
    const uint64_t offset = seedOffset != nullptr ? static_cast<uint64_t>(seedOffset[1]) : offsetValue;
    const int64_t* tok = tokens + static_cast<size_t>(b) * N;
    int32_t* outNodes = acceptedNodes + static_cast<size_t>(b) * L;
    float* residual = workspace + static_cast<size_t>(b) * 2 * rowFloats;  // p after rejections
    float* qBuffer = residual + rowFloats;                                  // q without tried tokens
    const int32_t n = numNodes != nullptr ? numNodes[b] : N;
    const bool nOk = n >= 1 && n <= N;
    bool valid = detail::loadTree<kThreads>(parents + static_cast<size_t>(b) * N, tok, nOk ? n : 0, vocab, sParents) &&
                 nOk;
    auto row = [&](const float* base, int32_t node) {
        return base + (static_cast<size_t>(b) * N + node) * static_cast<size_t>(vocab);
    };

    int32_t u = 0, len = 0;
    uint64_t k = 0;  // index of the next uniform draw of this request
    int64_t bonus = -1;
    if (valid) {
        if (threadIdx.x == 0) outNodes[0] = 0;
        const float* p = row(targetProbs, 0);
        bool descended = true;
        while (descended) {
            descended = false;
            const float* q = row(draftProbs, u);
            int32_t child = u;
            while (true) {
                child = detail::nextChild<kThreads>(sParents, u, child, n, s);  // ends with a barrier
                if (child == INT32_MAX) break;
                const int32_t x = static_cast<int32_t>(tok[child]);
                const double r = uniform(seed, offset, static_cast<uint64_t>(b), k++);
                const bool accept = __dmul_rn(r, static_cast<double>(q[x])) < static_cast<double>(p[x]);
                __syncthreads();  // every thread has read p[x], q[x] before any thread rewrites them
                if (accept) {
                    if (len + 1 >= L) {
                        valid = false;
                        break;
                    }
                    ++len;
                    u = child;
                    if (threadIdx.x == 0) outNodes[len] = u;
                    p = row(targetProbs, child);
                    descended = true;
                    break;
                }
                // rejected: p <- normalize(max(p - q, 0)), in place in the workspace row
                double mass = 0.0;
                #pragma unroll 4
                for (int32_t v = threadIdx.x; v < vocab; v += kThreads) {
                    const float rv = fmaxf(__fsub_rn(p[v], q[v]), 0.0f);
                    residual[v] = rv;
                    mass += static_cast<double>(rv);
                }
                mass = B::sum(mass, s);
                if (mass > 0.0) {
                    #pragma unroll 4
                    for (int32_t v = threadIdx.x; v < vocab; v += kThreads)
                        residual[v] = static_cast<float>(__ddiv_rn(static_cast<double>(residual[v]), mass));
                }
                p = residual;
                if (withoutReplacement) {  // q(x) <- 0, q <- normalize(q)
                    double qMass = 0.0;
                    #pragma unroll 4
                    for (int32_t v = threadIdx.x; v < vocab; v += kThreads) {
                        const float qv = v == x ? 0.0f : q[v];
                        qBuffer[v] = qv;
                        qMass += static_cast<double>(qv);
                    }
                    qMass = B::sum(qMass, s);
                    if (qMass > 0.0) {
                        #pragma unroll 4
                        for (int32_t v = threadIdx.x; v < vocab; v += kThreads)
                            qBuffer[v] = static_cast<float>(__ddiv_rn(static_cast<double>(qBuffer[v]), qMass));
                    }
                    q = qBuffer;
                }
                __syncthreads();  // the rows written above are read whole by the next decision
            }
            if (!valid) break;
        }
        if (valid) {
            const double r = uniform(seed, offset, static_cast<uint64_t>(b), k);
            bonus = detail::sample<kThreads, kItems>([p](int32_t v) { return p[v]; }, vocab, r, s);
            const float* last = row(targetProbs, u);
            if (bonus < 0 && p != last)  // rounding emptied the residual: the CPU's fallback
                bonus = detail::sample<kThreads, kItems>([last](int32_t v) { return last[v]; }, vocab, r, s);
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
        bonusToken[b] = bonus;
    }
}

}  // namespace

size_t verifySampleWorkspaceSize(int32_t batch, int64_t vocab) {
    if (batch <= 0 || vocab <= 0) return 0;
    return static_cast<size_t>(batch) * 2 * rowBytes(vocab);
}

namespace {

Status launch(const int64_t* tokens, const int32_t* parents, const float* targetProbs, const float* draftProbs,
              const int32_t* numNodes, int32_t batch, int32_t nodes, int64_t vocab, int32_t maxDepth, uint64_t seed,
              uint64_t offset, const int64_t* seedOffset, bool siblingsWithoutReplacement, int32_t* acceptedLen,
              int32_t* acceptedNodes, int64_t* bonusToken, void* workspace, size_t workspaceBytes,
              cudaStream_t stream) {
    if (batch < 0 || batch > kMaxBatch || nodes < 1 || nodes > kMaxNodes || vocab < 1 || vocab > INT32_MAX ||
        maxDepth < 0 || maxDepth >= kMaxNodes)
        return Status::kInvalidArgument;
    if (batch == 0) return Status::kSuccess;
    if (!tokens || !parents || !targetProbs || !draftProbs || !acceptedLen || !acceptedNodes || !bonusToken ||
        !workspace || workspaceBytes < verifySampleWorkspaceSize(batch, vocab) ||
        reinterpret_cast<uintptr_t>(workspace) % 256 != 0)
        return Status::kInvalidArgument;
    const size_t smem = sizeof(int32_t) * static_cast<size_t>(nodes);
    verifySampleKernel<<<batch, kThreads, smem, stream>>>(
        tokens, parents, targetProbs, draftProbs, numNodes, nodes, static_cast<int32_t>(vocab), maxDepth + 1, seed,
        offset, seedOffset, siblingsWithoutReplacement, static_cast<float*>(workspace),
        rowBytes(vocab) / sizeof(float), acceptedLen, acceptedNodes, bonusToken);
    return detail::checkLaunch();
}

}  // namespace

Status verifySample(const int64_t* tokens, const int32_t* parents, const float* targetProbs,
                    const float* draftProbs, const int32_t* numNodes, int32_t batch, int32_t nodes,
                    int64_t vocab, int32_t maxDepth, uint64_t seed, uint64_t offset,
                    bool siblingsWithoutReplacement, int32_t* acceptedLen, int32_t* acceptedNodes,
                    int64_t* bonusToken, void* workspace, size_t workspaceBytes, cudaStream_t stream) {
    return launch(tokens, parents, targetProbs, draftProbs, numNodes, batch, nodes, vocab, maxDepth, seed, offset,
                  nullptr, siblingsWithoutReplacement, acceptedLen, acceptedNodes, bonusToken, workspace,
                  workspaceBytes, stream);
}

Status verifySampleSeedOnDevice(const int64_t* tokens, const int32_t* parents, const float* targetProbs,
                                const float* draftProbs, const int32_t* numNodes, int32_t batch, int32_t nodes,
                                int64_t vocab, int32_t maxDepth, const int64_t* seedOffset,
                                bool siblingsWithoutReplacement, int32_t* acceptedLen, int32_t* acceptedNodes,
                                int64_t* bonusToken, void* workspace, size_t workspaceBytes, cudaStream_t stream) {
    if (!seedOffset) return Status::kInvalidArgument;
    return launch(tokens, parents, targetProbs, draftProbs, numNodes, batch, nodes, vocab, maxDepth, 0, 0,
                  seedOffset, siblingsWithoutReplacement, acceptedLen, acceptedNodes, bonusToken, workspace,
                  workspaceBytes, stream);
}

}  // namespace cuda
}  // namespace trtspec
