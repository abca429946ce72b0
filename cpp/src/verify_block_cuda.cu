// CUDA verify_block: block verification of a chain (Sun et al., ICLR 2025), one block per request.
//
// Layout (the sampled verifiers' one layout): draft tokens [B, D] (int32 or int64), target rows
// [B, D+1, V], draft rows [B, D, V], draft_lens [B] or null (request b verifies d = draft_lens[b]
// drafts), seed/offset [B] in device memory. Uniforms of request b, as in the reference: eta_i is
// draw 0 at position i, the bonus draw 1 at position tau, of its own stream (seed[b], offset[b]).
//
// Thread 0 computes the weights w_1..w_d from the drafts' point probabilities; the block then
// scans i = d, d-1, ..., 1 and stops at the first i with eta_i <= h_i (tau is the largest such
// i), so the residual mass sum(r_i) is computed only for the positions it needs. The bonus residual r_tau is recomputed on the fly while sampling,
// so this launcher needs no workspace (verifyBlockWorkspaceSize returns 0). The float64 sums are
// block reductions (see verify_sample_cuda.cu for what that means for bit equality).
//
// Invalid request (draft_lens[b] outside [0, D], or a used draft token outside [0, V)):
// accepted_len[b] = 0 and bonus_token[b] = -1.
// If rounding empties r_tau the bonus is drawn from target row tau (as on the CPU); if the row it
// is finally drawn from has no positive entry (invalid probabilities), the bonus is -1.
#include "cuda_common.cuh"
#include "trtspec/kernels.h"

namespace trtspec {
namespace cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kItems = 4;

// r_i(v) = float(max(w * p_i(v) - q_i(v), 0)) with the reference's float64 rounding (no FMA).
struct Residual {
    const float* p;
    const float* q;
    double w;
    __device__ __forceinline__ float operator()(int32_t v) const {
        return static_cast<float>(fmax(__dsub_rn(__dmul_rn(w, static_cast<double>(p[v])), static_cast<double>(q[v])),
                                       0.0));
    }
};
struct Row {
    const float* p;
    __device__ __forceinline__ float operator()(int32_t v) const { return p[v]; }
};

template <typename Token>
__global__ void __launch_bounds__(kThreads)
    verifyBlockKernel(const Token* __restrict__ draftTokens, const float* __restrict__ targetProbs,
                      const float* __restrict__ draftProbs, const int32_t* __restrict__ draftLens,
                      const int64_t* __restrict__ seeds, const int64_t* __restrict__ offsets, int32_t D, int32_t vocab,
                      int32_t* __restrict__ acceptedLen, int64_t* __restrict__ bonusToken) {
    using B = detail::Block<kThreads>;
    extern __shared__ double sWeight[];  // [D + 1]: w_0 .. w_d
    __shared__ typename B::Shared s;
    const int32_t b = blockIdx.x;
    const uint64_t seed = static_cast<uint64_t>(seeds[b]), offset = static_cast<uint64_t>(offsets[b]);
    const int32_t d = draftLens != nullptr ? draftLens[b] : D;
    const Token* x = draftTokens + static_cast<size_t>(b) * D;
    const float* target = targetProbs + static_cast<size_t>(b) * (D + 1) * vocab;  // row i: p_i
    const float* draft = draftProbs + static_cast<size_t>(b) * D * vocab;          // row i: q_i

    int bad = d < 0 || d > D;
    for (int32_t i = threadIdx.x; i < d && !bad; i += kThreads)
        if (x[i] < 0 || static_cast<int64_t>(x[i]) >= vocab) bad = 1;
    if (__syncthreads_or(bad)) {
        if (threadIdx.x == 0) {
            acceptedLen[b] = 0;
            bonusToken[b] = -1;
        }
        return;
    }
    if (threadIdx.x == 0) {
        double w = 1.0;
        sWeight[0] = w;
        for (int32_t i = 1; i <= d; ++i) {  // w_i = min(1, w_{i-1} p_{i-1}(X_i) / q_{i-1}(X_i))
            const size_t at = static_cast<size_t>(i - 1) * vocab + static_cast<size_t>(x[i - 1]);
            const double px = target[at], qx = draft[at];
            w = qx > 0.0 ? fmin(1.0, __ddiv_rn(__dmul_rn(w, px), qx)) : (px > 0.0 ? 1.0 : 0.0);
            sWeight[i] = w;
        }
    }
    __syncthreads();

    int32_t tau = 0;
    for (int32_t i = d; i >= 1; --i) {
        const double w = sWeight[i];
        double h = w;
        if (i < d) {  // h_i = m / (m + 1 - w_i), m = sum(r_i)
            const Residual r{target + static_cast<size_t>(i) * vocab, draft + static_cast<size_t>(i) * vocab, w};
            double m = 0.0;
            #pragma unroll 4
            for (int32_t v = threadIdx.x; v < vocab; v += kThreads) m += static_cast<double>(r(v));
            m = B::sum(m, s);
            const double denom = __dsub_rn(__dadd_rn(m, 1.0), w);
            h = denom > 0.0 ? __ddiv_rn(m, denom) : 1.0;
        }
        if (uniform(seed, offset, static_cast<uint64_t>(i), 0) <= h) {
            tau = i;
            break;
        }
    }

    const double u = uniform(seed, offset, static_cast<uint64_t>(tau), 1);
    int64_t bonus;
    if (tau < d) {
        const Residual r{target + static_cast<size_t>(tau) * vocab, draft + static_cast<size_t>(tau) * vocab,
                         sWeight[tau]};
        bonus = detail::sample<kThreads, kItems>(r, vocab, u, s);
        if (bonus < 0)  // rounding emptied r_tau: the CPU's fallback, the target row tau
            bonus = detail::sample<kThreads, kItems>(Row{target + static_cast<size_t>(tau) * vocab}, vocab, u, s);
    } else {
        bonus = detail::sample<kThreads, kItems>(Row{target + static_cast<size_t>(d) * vocab}, vocab, u, s);
    }
    if (threadIdx.x == 0) {
        acceptedLen[b] = tau;
        bonusToken[b] = bonus;
    }
}

template <typename Token>
Status launch(const Token* draftTokens, const float* targetProbs, const float* draftProbs, const int32_t* draftLens,
              const int64_t* seed, const int64_t* offset, int32_t batch, int32_t draftLen, int64_t vocab,
              int32_t* acceptedLen, int64_t* bonusToken, cudaStream_t stream) {
    if (batch < 0 || batch > kMaxBatch || draftLen < 0 || draftLen > kMaxBlockDraft || vocab < 1 ||
        vocab > INT32_MAX)
        return Status::kInvalidArgument;
    if (batch == 0) return Status::kSuccess;
    if ((draftLen > 0 && (!draftTokens || !draftProbs)) || !targetProbs || !seed || !offset || !acceptedLen ||
        !bonusToken)
        return Status::kInvalidArgument;
    const size_t smem = sizeof(double) * (static_cast<size_t>(draftLen) + 1);
    verifyBlockKernel<Token><<<batch, kThreads, smem, stream>>>(draftTokens, targetProbs, draftProbs, draftLens, seed,
                                                                offset, draftLen, static_cast<int32_t>(vocab),
                                                                acceptedLen, bonusToken);
    return detail::checkLaunch();
}

}  // namespace

size_t verifyBlockWorkspaceSize(int32_t /*batch*/, int32_t /*draftLen*/, int64_t /*vocab*/) { return 0; }

Status verifyBlock(const int32_t* draftTokens, const float* targetProbs, const float* draftProbs,
                   const int32_t* draftLens, const int64_t* seed, const int64_t* offset, int32_t batch,
                   int32_t draftLen, int64_t vocab, int32_t* acceptedLen, int64_t* bonusToken, void* /*workspace*/,
                   size_t /*workspaceBytes*/, cudaStream_t stream) {
    return launch(draftTokens, targetProbs, draftProbs, draftLens, seed, offset, batch, draftLen, vocab, acceptedLen,
                  bonusToken, stream);
}

Status verifyBlock(const int64_t* draftTokens, const float* targetProbs, const float* draftProbs,
                   const int32_t* draftLens, const int64_t* seed, const int64_t* offset, int32_t batch,
                   int32_t draftLen, int64_t vocab, int32_t* acceptedLen, int64_t* bonusToken, void* /*workspace*/,
                   size_t /*workspaceBytes*/, cudaStream_t stream) {
    return launch(draftTokens, targetProbs, draftProbs, draftLens, seed, offset, batch, draftLen, vocab, acceptedLen,
                  bonusToken, stream);
}

}  // namespace cuda
}  // namespace trtspec
