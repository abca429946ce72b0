// CUDA verify_sample: multi-draft recursive rejection sampling, one block per request.
//
// Layout (the sampled verifiers' one layout): draft tokens [B, D] (int32 or int64; draft j is node
// j+1), parents [B, D+1], target rows [B, D+1, V], draft rows [B, D, V] (row j: the distribution
// draft j was drawn from), draft_lens [B] or null, seed/offset [B] in device memory. Request b's
// uniforms come from its own stream (seed[b], offset[b]), as in the reference: the test of node c
// is draw (c, 0), the bonus drawn at node u draw (u, 1).
//
// The residual target distribution p (after a rejection) and, with siblings_without_replacement,
// the renormalised draft distribution q live in the workspace: two float rows of V per request.
// Point decisions (uniform * q(x) < p(x)) and elementwise residuals are bit-identical to the
// reference; the float64 normalising sums are block reductions, so they can differ from the CPU's
// sequential sums in the last bits (exactly equal when every sum is exact, e.g. dyadic inputs).
//
// Invalid request (draft_lens[b] outside [0, D], parents not topological / out of range, a used
// draft token outside [0, V), or an accepted path longer than max_depth + 1 nodes):
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

template <typename Token>
__global__ void __launch_bounds__(kThreads, 1)
    verifySampleKernel(const Token* __restrict__ draftTokens, const int32_t* __restrict__ parents,
                       const float* __restrict__ targetProbs, const float* __restrict__ draftProbs,
                       const int32_t* __restrict__ draftLens, const int64_t* __restrict__ seeds,
                       const int64_t* __restrict__ offsets, int32_t D, int32_t vocab, int32_t L,
                       bool withoutReplacement, float* workspace, size_t rowFloats,
                       int32_t* __restrict__ acceptedLen, int32_t* __restrict__ acceptedNodes,
                       int64_t* __restrict__ bonusToken) {
    using B = detail::Block<kThreads>;
    extern __shared__ int32_t sParents[];  // [D + 1]
    __shared__ typename B::Shared s;
    const int32_t b = blockIdx.x, N = D + 1;
    const uint64_t seed = static_cast<uint64_t>(seeds[b]), offset = static_cast<uint64_t>(offsets[b]);
    const Token* tok = draftTokens + static_cast<size_t>(b) * D;  // node c's token: tok[c - 1]
    int32_t* outNodes = acceptedNodes + static_cast<size_t>(b) * L;
    float* residual = workspace + static_cast<size_t>(b) * 2 * rowFloats;  // p after rejections
    float* qBuffer = residual + rowFloats;                                  // q without tried tokens
    const int32_t d = draftLens != nullptr ? draftLens[b] : D;
    const bool dOk = d >= 0 && d <= D;
    const int32_t n = dOk ? d + 1 : 0;
    bool valid = detail::loadTree<kThreads, Token>(parents + static_cast<size_t>(b) * N, tok, n, vocab, sParents, 1) &&
                 dOk;
    auto target = [&](int32_t node) {
        return targetProbs + (static_cast<size_t>(b) * N + node) * static_cast<size_t>(vocab);
    };
    auto draft = [&](int32_t node) {  // the row draft `node` (node >= 1) was drawn from
        return draftProbs + (static_cast<size_t>(b) * D + node - 1) * static_cast<size_t>(vocab);
    };

    int32_t u = 0, len = 0;
    int64_t bonus = -1;
    if (valid) {
        if (threadIdx.x == 0) outNodes[0] = 0;
        const float* p = target(0);
        bool descended = true;
        while (descended) {
            descended = false;
            const float* q = nullptr;  // the child's row, or qBuffer once a sibling was removed
            int32_t child = u;
            while (true) {
                child = detail::nextChild<kThreads>(sParents, u, child, n, s);  // ends with a barrier
                if (child == INT32_MAX) break;
                if (!withoutReplacement || q == nullptr) q = draft(child);
                const int32_t x = static_cast<int32_t>(tok[child - 1]);
                const double r = uniform(seed, offset, static_cast<uint64_t>(child), 0);
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
                    p = target(child);
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
            const double r = uniform(seed, offset, static_cast<uint64_t>(u), 1);
            bonus = detail::sample<kThreads, kItems>([p](int32_t v) { return p[v]; }, vocab, r, s);
            const float* last = target(u);
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

template <typename Token>
Status launch(const Token* draftTokens, const int32_t* parents, const float* targetProbs, const float* draftProbs,
              const int32_t* draftLens, const int64_t* seed, const int64_t* offset, int32_t batch, int32_t draftLen,
              int64_t vocab, int32_t maxDepth, bool siblingsWithoutReplacement, int32_t* acceptedLen,
              int32_t* acceptedNodes, int64_t* bonusToken, void* workspace, size_t workspaceBytes,
              cudaStream_t stream) {
    if (batch < 0 || batch > kMaxBatch || draftLen < 0 || draftLen >= kMaxNodes || vocab < 1 || vocab > INT32_MAX ||
        maxDepth < 0 || maxDepth >= kMaxNodes)
        return Status::kInvalidArgument;
    if (batch == 0) return Status::kSuccess;
    if ((draftLen > 0 && (!draftTokens || !draftProbs)) || !parents || !targetProbs || !seed || !offset ||
        !acceptedLen || !acceptedNodes || !bonusToken || !workspace ||
        workspaceBytes < verifySampleWorkspaceSize(batch, vocab) || reinterpret_cast<uintptr_t>(workspace) % 256 != 0)
        return Status::kInvalidArgument;
    const size_t smem = sizeof(int32_t) * (static_cast<size_t>(draftLen) + 1);
    verifySampleKernel<Token><<<batch, kThreads, smem, stream>>>(
        draftTokens, parents, targetProbs, draftProbs, draftLens, seed, offset, draftLen, static_cast<int32_t>(vocab),
        maxDepth + 1, siblingsWithoutReplacement, static_cast<float*>(workspace), rowBytes(vocab) / sizeof(float),
        acceptedLen, acceptedNodes, bonusToken);
    return detail::checkLaunch();
}

}  // namespace

size_t verifySampleWorkspaceSize(int32_t batch, int64_t vocab) {
    if (batch <= 0 || vocab <= 0) return 0;
    return static_cast<size_t>(batch) * 2 * rowBytes(vocab);
}

Status verifySample(const int32_t* draftTokens, const int32_t* parents, const float* targetProbs,
                    const float* draftProbs, const int32_t* draftLens, const int64_t* seed, const int64_t* offset,
                    int32_t batch, int32_t draftLen, int64_t vocab, int32_t maxDepth,
                    bool siblingsWithoutReplacement, int32_t* acceptedLen, int32_t* acceptedNodes,
                    int64_t* bonusToken, void* workspace, size_t workspaceBytes, cudaStream_t stream) {
    return launch(draftTokens, parents, targetProbs, draftProbs, draftLens, seed, offset, batch, draftLen, vocab,
                  maxDepth, siblingsWithoutReplacement, acceptedLen, acceptedNodes, bonusToken, workspace,
                  workspaceBytes, stream);
}

Status verifySample(const int64_t* draftTokens, const int32_t* parents, const float* targetProbs,
                    const float* draftProbs, const int32_t* draftLens, const int64_t* seed, const int64_t* offset,
                    int32_t batch, int32_t draftLen, int64_t vocab, int32_t maxDepth,
                    bool siblingsWithoutReplacement, int32_t* acceptedLen, int32_t* acceptedNodes,
                    int64_t* bonusToken, void* workspace, size_t workspaceBytes, cudaStream_t stream) {
    return launch(draftTokens, parents, targetProbs, draftProbs, draftLens, seed, offset, batch, draftLen, vocab,
                  maxDepth, siblingsWithoutReplacement, acceptedLen, acceptedNodes, bonusToken, workspace,
                  workspaceBytes, stream);
}

}  // namespace cuda
}  // namespace trtspec
