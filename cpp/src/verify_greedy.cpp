// CPU launcher of verify_greedy: follow the target's argmax down the tree (see reference.py).
//
// The argmax is fused into the walk and reads only the logits rows of visited nodes. It works on
// an order-preserving integer key of each element's bits (sign-magnitude -> two's complement,
// -0 == +0), which orders float32/float16/bfloat16 values exactly like comparing them as floats,
// so no conversion is needed and the block maximum vectorises. Ties go to the lowest index and a
// NaN counts as the maximum (first NaN wins), both as torch.argmax.
#include <climits>
#include <limits>
#include <type_traits>

#include "cpu_common.h"

namespace trtspec {
namespace cpu {
namespace {

template <typename U>
struct Bits;
template <>
struct Bits<uint32_t> {  // float32
    static constexpr uint32_t kSign = 0x80000000u, kMag = 0x7FFFFFFFu, kInf = 0x7F800000u;
};
template <uint32_t Inf>
struct Bits16 {
    static constexpr uint32_t kSign = 0x8000u, kMag = 0x7FFFu, kInf = Inf;
};
struct HalfBits : Bits16<0x7C00u> {};
struct BF16Bits : Bits16<0x7F80u> {};

template <typename U, typename B>
inline int32_t key(U v) {
    const uint32_t mag = static_cast<uint32_t>(v) & B::kMag;
    return (static_cast<uint32_t>(v) & B::kSign) ? -static_cast<int32_t>(mag) : static_cast<int32_t>(mag);
}

// argmax of row[0..v): ties -> lowest index, NaN is the maximum (first NaN wins).
template <typename U, typename B>
int64_t argmaxRow(const U* row, int64_t v) {
    constexpr int64_t kBlock = 2048;
    int32_t best = INT32_MIN;
    int64_t bestBlock = 0;
    for (int64_t start = 0; start < v; start += kBlock) {
        const int64_t len = std::min(kBlock, v - start);
        const U* blk = row + start;
        int32_t bmax = INT32_MIN;
        uint32_t nan = 0;
        for (int64_t i = 0; i < len; ++i) {  // vectorisable: integer max + flag
            const uint32_t mag = static_cast<uint32_t>(blk[i]) & B::kMag;
            const int32_t k = key<U, B>(blk[i]);
            bmax = k > bmax ? k : bmax;
            nan |= static_cast<uint32_t>(mag > B::kInf);
        }
        if (nan) {
            for (int64_t i = 0; i < len; ++i)
                if ((static_cast<uint32_t>(blk[i]) & B::kMag) > B::kInf) return start + i;
        }
        if (bmax > best || start == 0) {
            best = bmax;
            bestBlock = start;
        }
    }
    const int64_t len = std::min(kBlock, v - bestBlock);
    for (int64_t i = 0; i < len; ++i)
        if (key<U, B>(row[bestBlock + i]) == best) return bestBlock + i;
    return bestBlock;  // unreachable
}

#ifdef TRTSPEC_SSE2
// float32 argmax with SSE2 block maxima (same semantics as argmaxRow: ties -> lowest index,
// -0 == +0, first NaN wins).
int64_t argmaxF32(const float* row, int64_t v) {
    constexpr int64_t kBlock = 2048;
    float best = 0.0f;
    int64_t bestBlock = -1;
    for (int64_t start = 0; start < v; start += kBlock) {
        const int64_t len = std::min(kBlock, v - start);
        const float* blk = row + start;
        const __m128 ninf = _mm_set1_ps(-std::numeric_limits<float>::infinity());
        __m128 m0 = ninf, m1 = ninf, un = _mm_setzero_ps();
        int64_t i = 0;
        for (; i + 8 <= len; i += 8) {
            const __m128 a = _mm_loadu_ps(blk + i), b = _mm_loadu_ps(blk + i + 4);
            un = _mm_or_ps(un, _mm_or_ps(_mm_cmpunord_ps(a, a), _mm_cmpunord_ps(b, b)));
            m0 = _mm_max_ps(m0, a);
            m1 = _mm_max_ps(m1, b);
        }
        __m128 m = _mm_max_ps(m0, m1);
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        m = _mm_max_ps(m, _mm_shuffle_ps(m, m, 1));
        float bmax = _mm_cvtss_f32(m);
        bool nan = _mm_movemask_ps(un) != 0;
        for (; i < len; ++i) {
            nan |= blk[i] != blk[i];
            bmax = blk[i] > bmax ? blk[i] : bmax;
        }
        if (nan) {
            for (int64_t j = 0; j < len; ++j)
                if (blk[j] != blk[j]) return start + j;
        }
        if (bestBlock < 0 || bmax > best) {
            best = bmax;
            bestBlock = start;
        }
    }
    const int64_t len = std::min(kBlock, v - bestBlock);
    for (int64_t i = 0; i < len; ++i)
        if (row[bestBlock + i] == best) return bestBlock + i;
    return bestBlock;  // unreachable
}
#endif

template <typename U, typename B>
int64_t argmax(const U* row, int64_t v) {
#ifdef TRTSPEC_SSE2
    if constexpr (std::is_same<U, uint32_t>::value) return argmaxF32(reinterpret_cast<const float*>(row), v);
#endif
    return argmaxRow<U, B>(row, v);
}

template <typename U, typename B>
Status run(const int64_t* tokens, const int32_t* parents, const U* logits, const int32_t* numNodes,
           int32_t batch, int32_t nodes, int64_t vocab, int32_t maxDepth, int32_t* acceptedLen,
           int32_t* acceptedNodes, int64_t* bonusToken) {
    const int64_t width = static_cast<int64_t>(maxDepth) + 1;
    const double work = static_cast<double>(batch) * (static_cast<double>(vocab) * 2 + nodes);
    return detail::parallelFor(batch, detail::numThreads(batch, work), [&](int32_t b0, int32_t b1) {
        detail::TreeScratch tree(nodes);
        for (int32_t b = b0; b < b1; ++b) {
            int32_t* path = acceptedNodes + b * width;
            const int64_t* tok = tokens + static_cast<int64_t>(b) * nodes;
            int32_t n = 0;
            Status s = detail::beginTreeRequest(numNodes, parents, tokens, b, nodes, vocab, maxDepth, tree, acceptedLen,
                                                acceptedNodes, bonusToken, &n);
            if (s != Status::kSuccess) return s;
            int32_t u = 0, len = 0;
            int64_t t = 0;
            path[0] = 0;
            while (true) {
                t = argmax<U, B>(logits + (static_cast<int64_t>(b) * nodes + u) * vocab, vocab);
                int32_t next = -1;
                for (int32_t c = tree.firstChild[u]; c >= 0; c = tree.nextSibling[c])
                    if (tok[c] == t) {
                        next = c;  // first matching child in index order
                        break;
                    }
                if (next < 0) break;
                u = next;
                path[++len] = u;  // len <= depth(u) <= maxDepth
            }
            acceptedLen[b] = len;
            bonusToken[b] = t;
        }
        return Status::kSuccess;
    });
}

}  // namespace

Status verifyGreedy(const int64_t* tokens, const int32_t* parents, const void* logits, DType dtype,
                    const int32_t* numNodes, int32_t batch, int32_t nodes, int64_t vocab, int32_t maxDepth,
                    int32_t* acceptedLen, int32_t* acceptedNodes, int64_t* bonusToken) {
    if (batch < 0 || batch > kMaxBatch || nodes < 1 || nodes > kMaxNodes || vocab < 1 || maxDepth < 0 ||
        maxDepth >= kMaxNodes)
        return Status::kInvalidArgument;
    if (batch > 0 && (!tokens || !parents || !logits || !acceptedLen || !acceptedNodes || !bonusToken))
        return Status::kInvalidArgument;
    switch (dtype) {
        case DType::kFloat32:
            return run<uint32_t, Bits<uint32_t>>(tokens, parents, static_cast<const uint32_t*>(logits), numNodes,
                                                 batch, nodes, vocab, maxDepth, acceptedLen, acceptedNodes,
                                                 bonusToken);
        case DType::kFloat16:
            return run<uint16_t, HalfBits>(tokens, parents, static_cast<const uint16_t*>(logits), numNodes, batch,
                                           nodes, vocab, maxDepth, acceptedLen, acceptedNodes, bonusToken);
        case DType::kBFloat16:
            return run<uint16_t, BF16Bits>(tokens, parents, static_cast<const uint16_t*>(logits), numNodes, batch,
                                           nodes, vocab, maxDepth, acceptedLen, acceptedNodes, bonusToken);
    }
    return Status::kInvalidArgument;
}

}  // namespace cpu
}  // namespace trtspec
