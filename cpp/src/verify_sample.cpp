// CPU launcher of verify_sample: multi-draft recursive rejection sampling over a tree, with or
// without replacement among siblings (see reference.py for the maths; this mirrors it operation
// for operation: float32 residuals, sequential float64 sums, the same uniform draw order).
//
// Only what the walk needs is read: p(x), q(x) for an accept test, the full rows of p and q after
// a rejection, and the bonus row. Every value read is checked (NaN/Inf/negative -> error).
// Request b's uniforms come from (seed[b], offset[b]) and its own tree: the test of node c is draw
// (c, 0), the bonus drawn at node u draw (u, 1).
#include "cpu_common.h"
#include "trtspec/random.h"

namespace trtspec {
namespace cpu {
namespace {

// A row w = buf / total whose divisor (the sequential float64 sum of buf) is, until needed,
// only bracketed by [lo, hi] from a fast sum: entry x then lies in [float(buf[x]/hi), float(buf[x]/lo)].
struct LazyRow {
    float* buf = nullptr;
    int64_t v = 0;
    bool pending = false;
    double lo = 0.0, hi = 0.0;

    // buf now holds the unnormalised row; start a bracket (no-op normalisation if its sum is 0)
    void start() {
        const double fast = detail::fastSum(buf, v);
        pending = fast > 0.0;
        const double err = 2.5 * static_cast<double>(v) * 0x1p-53 * fast;  // >= |sequential - fast|
        lo = fast - err;
        hi = fast + err;
    }
    double lower(int64_t x) const { return static_cast<float>(static_cast<double>(buf[x]) / hi); }
    double upper(int64_t x) const { return static_cast<float>(static_cast<double>(buf[x]) / lo); }
    void materialize() {
        if (!pending) return;
        const double total = detail::seqSum(buf, v);
        if (total > 0.0) detail::divideInto(buf, buf, v, total);
        pending = false;
    }
};

template <typename Token>
Status sample(const Token* draftTokens, const int32_t* parents, const float* targetProbs, const float* draftProbs,
              const int32_t* draftLens, const int64_t* seed, const int64_t* offset, int32_t batch, int32_t draftLen,
              int64_t vocab, int32_t maxDepth, bool siblingsWithoutReplacement, int32_t* acceptedLen,
              int32_t* acceptedNodes, int64_t* bonusToken) {
    if (batch < 0 || batch > kMaxBatch || draftLen < 0 || draftLen >= kMaxNodes || vocab < 1 || maxDepth < 0 ||
        maxDepth >= kMaxNodes)
        return Status::kInvalidArgument;
    if (batch > 0 && (!parents || !targetProbs || !seed || !offset || !acceptedLen || !acceptedNodes ||
                      !bonusToken || (draftLen > 0 && (!draftTokens || !draftProbs))))
        return Status::kInvalidArgument;
    const int32_t D = draftLen, nodes = draftLen + 1;
    const int64_t width = static_cast<int64_t>(maxDepth) + 1;
    const double work = static_cast<double>(batch) * (static_cast<double>(vocab) * 4 + nodes);
    return detail::parallelFor(batch, detail::numThreads(batch, work), [&](int32_t b0, int32_t b1) {
        detail::TreeScratch tree(nodes);
        std::vector<float> pbuf(vocab), qbuf(vocab);
        std::vector<double> cdf(vocab);
        for (int32_t b = b0; b < b1; ++b) {
            int32_t* path = acceptedNodes + b * width;
            const Token* tok = draftTokens + static_cast<int64_t>(b) * D;  // node c's token: tok[c - 1]
            int32_t d = 0;
            Status s = detail::requestDrafts(draftLens, b, D, &d);
            if (s == Status::kSuccess)
                s = detail::beginTree(parents + static_cast<int64_t>(b) * nodes, d + 1, b, maxDepth, tree,
                                      acceptedLen, acceptedNodes, bonusToken);
            if (s == Status::kSuccess && !detail::tokensInVocab(tok, d, vocab)) s = Status::kInvalidToken;
            if (s != Status::kSuccess) return s;
            const uint64_t rs = static_cast<uint64_t>(seed[b]), ro = static_cast<uint64_t>(offset[b]);

            auto target = [&](int32_t node) { return targetProbs + (static_cast<int64_t>(b) * nodes + node) * vocab; };
            auto draft = [&](int32_t node) { return draftProbs + (static_cast<int64_t>(b) * D + node - 1) * vocab; };
            int32_t u = 0, len = 0;
            path[0] = 0;
            const float* p = target(0);  // current target distribution (a row or pbuf)
            // Lazy normalisation: after a rejection pbuf holds r = max(p - q, 0) and p = r / total
            // (and, without replacement, qbuf = q with q(x) = 0, divided by its sum); the sums are
            // only bracketed until a row is needed in full, and an accept test usually decides
            // from the brackets alone, exactly as the reference would.
            LazyRow lp, lq;
            lp.buf = pbuf.data();
            lq.buf = qbuf.data();
            lp.v = lq.v = vocab;
            bool descended = true;
            while (descended) {
                descended = false;
                const float* q = nullptr;  // the child's row, or qbuf once a sibling was removed
                lq.pending = false;
                for (int32_t c = tree.firstChild[u]; c >= 0; c = tree.nextSibling[c]) {
                    if (!siblingsWithoutReplacement || q == nullptr) q = draft(c);  // what draft c was drawn from
                    const int64_t x = static_cast<int64_t>(tok[c - 1]);
                    const double r = uniform(rs, ro, static_cast<uint64_t>(c), 0);
                    double pLo, pHi, qLo, qHi;  // p(x) and q(x), exact or bracketed
                    if (lp.pending) {
                        pLo = lp.lower(x);
                        pHi = lp.upper(x);
                    } else {
                        if (detail::badProb(p[x])) return Status::kInvalidProbability;
                        pLo = pHi = p[x];
                    }
                    if (lq.pending) {
                        qLo = lq.lower(x);
                        qHi = lq.upper(x);
                    } else {
                        if (detail::badProb(q[x])) return Status::kInvalidProbability;
                        qLo = qHi = q[x];
                    }
                    bool accept;  // r * q(x) < p(x): probability min(1, p/q)
                    if (r * qHi < pLo) {
                        accept = true;
                    } else if (!(r * qLo < pHi)) {
                        accept = false;
                    } else {
                        lp.materialize();
                        lq.materialize();
                        accept = r * static_cast<double>(q[x]) < static_cast<double>(p[x]);
                    }
                    if (accept) {
                        u = c;
                        path[++len] = c;
                        p = target(c);
                        lp.pending = false;
                        descended = true;
                        break;
                    }
                    // residual after a rejection: p <- normalize(max(p - q, 0))
                    lp.materialize();
                    lq.materialize();
                    if (detail::residualF32(p, q, pbuf.data(), vocab)) return Status::kInvalidProbability;
                    p = pbuf.data();
                    lp.start();
                    if (siblingsWithoutReplacement) {  // q(x) <- 0; q <- normalize(q)
                        if (q != qbuf.data()) std::copy(q, q + vocab, qbuf.data());
                        qbuf[x] = 0.0f;
                        q = qbuf.data();
                        lq.start();
                    }
                }
            }
            lp.materialize();
            // bonus ~ p; if rounding emptied the residual, ~ the target row of the last accepted node
            const double ub = uniform(rs, ro, static_cast<uint64_t>(u), 1);
            int64_t y = detail::sampleRow(p, vocab, ub, cdf.data(), /*check=*/p != pbuf.data());
            const float* last = target(u);
            if (y == -2 && p != last) y = detail::sampleRow(last, vocab, ub, cdf.data());
            if (y < 0) return Status::kInvalidProbability;
            bonusToken[b] = y;
            acceptedLen[b] = len;
        }
        return Status::kSuccess;
    });
}

}  // namespace

Status verifySample(const int32_t* draftTokens, const int32_t* parents, const float* targetProbs,
                    const float* draftProbs, const int32_t* draftLens, const int64_t* seed, const int64_t* offset,
                    int32_t batch, int32_t draftLen, int64_t vocab, int32_t maxDepth,
                    bool siblingsWithoutReplacement, int32_t* acceptedLen, int32_t* acceptedNodes,
                    int64_t* bonusToken) {
    return sample(draftTokens, parents, targetProbs, draftProbs, draftLens, seed, offset, batch, draftLen, vocab,
                  maxDepth, siblingsWithoutReplacement, acceptedLen, acceptedNodes, bonusToken);
}

Status verifySample(const int64_t* draftTokens, const int32_t* parents, const float* targetProbs,
                    const float* draftProbs, const int32_t* draftLens, const int64_t* seed, const int64_t* offset,
                    int32_t batch, int32_t draftLen, int64_t vocab, int32_t maxDepth,
                    bool siblingsWithoutReplacement, int32_t* acceptedLen, int32_t* acceptedNodes,
                    int64_t* bonusToken) {
    return sample(draftTokens, parents, targetProbs, draftProbs, draftLens, seed, offset, batch, draftLen, vocab,
                  maxDepth, siblingsWithoutReplacement, acceptedLen, acceptedNodes, bonusToken);
}

}  // namespace cpu
}  // namespace trtspec
