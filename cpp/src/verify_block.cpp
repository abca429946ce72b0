// CPU launcher of verify_block: block verification of a chain (Sun et al., ICLR 2025,
// arXiv 2403.10444). Mirrors reference.verify_block operation for operation.
//
// tau is the largest i with eta_i <= h_i, so the loop runs from i = D downwards and stops at the
// first success: rows below tau are never read. The test eta_i <= h_i is decided from a fast
// bracket of the residual mass (the sequential sum only when eta_i lands inside it), so its result
// is that of the reference's sequential sum. Uniforms of request b: eta_i is draw 0 at position i,
// the bonus draw 1 at position tau, of the stream (seed[b], offset[b]); d = draft_lens[b] drafts.
#include "cpu_common.h"
#include "trtspec/random.h"

namespace trtspec {
namespace cpu {
namespace {

// h_i exactly as the reference computes it from the residual mass.
inline double hOf(double mass, double w) {
    const double den = mass + 1.0 - w;
    return den > 0.0 ? mass / den : 1.0;
}

// The test eta <= h_i, where h_i uses the sequential float64 mass of r (= buf[0..v)). The mass is
// first bracketed with a fast sum and its rounding bound; only when eta falls inside the
// (tiny) bracket of h, or h is ill-conditioned (mass + 1 - w < 1e-6), is the sequential sum formed.
inline bool passes(double eta, const float* r, int64_t v, double w) {
    const double fast = detail::fastSum(r, v);
    const double err = 2.5 * static_cast<double>(v) * 0x1p-53 * fast;  // >= |sequential - fast|
    const double lo = std::max(0.0, fast - err), hi = fast + err;
    const double den = lo + (1.0 - w);
    if (den >= 1e-6) {
        // rounding of h's own formula: relative <= ~(hi + 1) * 2^-53 / den + 2^-52; margin 4x that
        const double margin = 4.0 * ((hi + 1.0) * 0x1p-53 / den + 0x1p-52);
        if (eta <= hOf(lo, w) * (1.0 - margin)) return true;
        if (eta > hOf(hi, w) * (1.0 + margin)) return false;
    }
    return eta <= hOf(detail::seqSum(r, v), w);
}

template <typename Token>
Status block(const Token* draftTokens, const float* targetProbs, const float* draftProbs, const int32_t* draftLens,
             const int64_t* seed, const int64_t* offset, int32_t batch, int32_t draftLen, int64_t vocab,
             int32_t* acceptedLen, int64_t* bonusToken) {
    if (batch < 0 || batch > kMaxBatch || draftLen < 0 || draftLen > kMaxBlockDraft || vocab < 1)
        return Status::kInvalidArgument;
    if (batch > 0 && (!targetProbs || !seed || !offset || !acceptedLen || !bonusToken ||
                      (draftLen > 0 && (!draftTokens || !draftProbs))))
        return Status::kInvalidArgument;
    const int32_t D = draftLen;
    const double work = static_cast<double>(batch) * static_cast<double>(vocab) * 4;
    return detail::parallelFor(batch, detail::numThreads(batch, work), [&](int32_t b0, int32_t b1) {
        std::vector<float> buf(vocab);
        std::vector<double> cdf(vocab);
        std::vector<double> w(D + 1);
        for (int32_t b = b0; b < b1; ++b) {
            acceptedLen[b] = 0;
            bonusToken[b] = 0;
            int32_t d = 0;  // this request's drafts
            Status s = detail::requestDrafts(draftLens, b, D, &d);
            if (s != Status::kSuccess) return s;
            const Token* tok = draftTokens + static_cast<int64_t>(b) * D;
            if (!detail::tokensInVocab(tok, d, vocab)) return Status::kInvalidToken;
            const uint64_t rs = static_cast<uint64_t>(seed[b]), ro = static_cast<uint64_t>(offset[b]);
            auto target = [&](int32_t i) { return targetProbs + (static_cast<int64_t>(b) * (D + 1) + i) * vocab; };
            auto draft = [&](int32_t i) { return draftProbs + (static_cast<int64_t>(b) * D + i) * vocab; };
            auto eta = [&](int32_t i) { return uniform(rs, ro, static_cast<uint64_t>(i), 0); };  // eta_i
            // w_i = min(1, w_{i-1} p_{i-1}(X_i) / q_{i-1}(X_i))
            w[0] = 1.0;
            for (int32_t i = 1; i <= d; ++i) {
                const int64_t x = static_cast<int64_t>(tok[i - 1]);
                const float px = target(i - 1)[x], qx = draft(i - 1)[x];
                if (detail::badProb(px) || detail::badProb(qx)) return Status::kInvalidProbability;
                if (qx > 0.0f) {
                    const double v = w[i - 1] * static_cast<double>(px) / static_cast<double>(qx);
                    w[i] = v < 1.0 ? v : 1.0;
                } else {
                    w[i] = px > 0.0f ? 1.0 : 0.0;
                }
            }
            // tau = largest i in 1..d with eta_i <= h_i; h_d = w_d, h_i = |r_i| / (|r_i| + 1 - w_i)
            int32_t tau = 0;
            bool haveResidual = false;  // buf holds r_tau
            if (d >= 1 && eta(d) <= w[d]) {
                tau = d;
            } else {
                for (int32_t i = d - 1; i >= 1; --i) {
                    if (detail::residualF64(target(i), draft(i), w[i], buf.data(), vocab))
                        return Status::kInvalidProbability;
                    if (passes(eta(i), buf.data(), vocab, w[i])) {
                        tau = i;
                        haveResidual = true;
                        break;
                    }
                }
            }
            // bonus ~ normalize(r_tau) if tau < d (target row tau if rounding emptied r_tau), else ~ p_d
            const double ub = uniform(rs, ro, static_cast<uint64_t>(tau), 1);
            int64_t y;
            if (tau < d) {
                if (!haveResidual && detail::residualF64(target(tau), draft(tau), w[tau], buf.data(), vocab))
                    return Status::kInvalidProbability;
                y = detail::sampleRow(buf.data(), vocab, ub, cdf.data(), /*check=*/false);
                if (y == -2) y = detail::sampleRow(target(tau), vocab, ub, cdf.data());
            } else {
                y = detail::sampleRow(target(d), vocab, ub, cdf.data());
            }
            if (y < 0) return Status::kInvalidProbability;
            bonusToken[b] = y;
            acceptedLen[b] = tau;
        }
        return Status::kSuccess;
    });
}

}  // namespace

Status verifyBlock(const int32_t* draftTokens, const float* targetProbs, const float* draftProbs,
                   const int32_t* draftLens, const int64_t* seed, const int64_t* offset, int32_t batch,
                   int32_t draftLen, int64_t vocab, int32_t* acceptedLen, int64_t* bonusToken) {
    return block(draftTokens, targetProbs, draftProbs, draftLens, seed, offset, batch, draftLen, vocab, acceptedLen,
                 bonusToken);
}

Status verifyBlock(const int64_t* draftTokens, const float* targetProbs, const float* draftProbs,
                   const int32_t* draftLens, const int64_t* seed, const int64_t* offset, int32_t batch,
                   int32_t draftLen, int64_t vocab, int32_t* acceptedLen, int64_t* bonusToken) {
    return block(draftTokens, targetProbs, draftProbs, draftLens, seed, offset, batch, draftLen, vocab, acceptedLen,
                 bonusToken);
}

}  // namespace cpu
}  // namespace trtspec
