// verify_greedy / verify_sample / verify_block on the CPU: half/bfloat16 conversion, argmax ties,
// known outcomes, poisoned outputs (every element written), error codes on bad input.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cpu_common.h"  // halfToFloat, bf16ToFloat
#include "trtspec/kernels.h"

using trtspec::DType;
using trtspec::Status;
using trtspec::detail::bf16ToFloat;
using trtspec::detail::halfToFloat;
static int failures = 0;
#define CHECK(cond)                                                                         \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);   \
            ++failures;                                                                     \
        }                                                                                   \
    } while (0)

constexpr int32_t kPoison32 = 0x5A5A5A5A;
constexpr int64_t kPoison64 = 0x5A5A5A5A5A5A5A5All;

static uint64_t lcgState = 12345;
static uint32_t next32() {
    lcgState = lcgState * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(lcgState >> 33);
}

static void testConverters() {
    CHECK(halfToFloat(0x3C00) == 1.0f);
    CHECK(halfToFloat(0xC000) == -2.0f);
    CHECK(halfToFloat(0x7BFF) == 65504.0f);
    CHECK(halfToFloat(0x0001) == 0x1p-24f);
    CHECK(halfToFloat(0x03FF) == 1023 * 0x1p-24f);
    CHECK(halfToFloat(0x3555) == 0x1.554p-2f);
    const float negZero = halfToFloat(0x8000);
    CHECK(negZero == 0.0f && std::signbit(negZero));
    CHECK(std::isinf(halfToFloat(0x7C00)) && halfToFloat(0xFC00) < 0);
    CHECK(std::isnan(halfToFloat(0x7E00)));
    CHECK(bf16ToFloat(0x3F80) == 1.0f);
    CHECK(bf16ToFloat(0xC0A0) == -5.0f);
    CHECK(std::isnan(bf16ToFloat(0x7FC0)));
}

// argmax by converting every element to float: ties -> lowest index (NaN-free rows)
static int64_t argmaxConverted(const std::vector<uint16_t>& row, bool bf16) {
    int64_t best = 0;
    for (size_t i = 1; i < row.size(); ++i) {
        const float a = bf16 ? bf16ToFloat(row[i]) : halfToFloat(row[i]);
        const float b = bf16 ? bf16ToFloat(row[best]) : halfToFloat(row[best]);
        if (a > b) best = static_cast<int64_t>(i);
    }
    return best;
}

static void testGreedyHalfPrecision(DType dtype) {
    const bool bf16 = dtype == DType::kBFloat16;
    const int64_t V = 5000;
    for (int trial = 0; trial < 40; ++trial) {
        // a chain root -> 1 whose token is the argmax of row 0: accepted; the bonus is argmax of row 1
        std::vector<uint16_t> logits(2 * V);
        const uint32_t range = trial % 2 ? 0x7000u : 0x7FFFu;  // narrow ranges make many ties
        for (auto& x : logits) {
            uint16_t v;
            do v = static_cast<uint16_t>(next32() & 0xFFFFu); while (((v & 0x7FFFu) % range) != (v & 0x7FFFu) ||
                                                                     (v & 0x7FFFu) >= (bf16 ? 0x7F80u : 0x7C00u));
            x = v;
        }
        if (trial % 3 == 0) logits[V + 7] = 0x8000, logits[V + 3] = 0x0000;  // -0 / +0
        const std::vector<uint16_t> row0(logits.begin(), logits.begin() + V), row1(logits.begin() + V, logits.end());
        const int64_t tokens[2] = {0, argmaxConverted(row0, bf16)};
        const int32_t parents[2] = {-1, 0};
        int32_t len = kPoison32, nodes[2] = {kPoison32, kPoison32};
        int64_t bonus = kPoison64;
        CHECK(trtspec::cpu::verifyGreedy(tokens, parents, logits.data(), dtype, nullptr, 1, 2, V, 1, &len, nodes,
                                         &bonus) == Status::kSuccess);
        CHECK(len == 1 && nodes[0] == 0 && nodes[1] == 1);
        CHECK(bonus == argmaxConverted(row1, bf16));
    }
}

static void testGreedyPoisonAndErrors() {
    // B=3 trees of N=4 (padding via num_nodes), V=6, float32; every output element written
    const int32_t B = 3, N = 4, L = 6;
    const int64_t V = 6;
    std::vector<float> logits(B * N * V, 0.0f);
    for (int32_t i = 0; i < B * N; ++i) logits[i * V + (i % V)] = 1.0f;  // argmax of row (b, u) = (b*N+u) % V
    const std::vector<int32_t> parents = {-1, 0, 0, 1, -1, 0, 1, 2, -1, 0, 0, 0};
    // request 0: row 0 argmax 0 -> child 2 (token 0) accepted; row 2 argmax 2 -> leaf: bonus 2
    // request 1: row 4 argmax 4 -> child 1 token 3: rejected; bonus 4
    // request 2 (num_nodes 1): only the root; row 8 argmax 2 -> bonus 2
    const std::vector<int64_t> tokens = {0, 5, 0, 1, 0, 3, 0, 0, 0, 2, 2, 2};
    const int32_t numNodes[3] = {4, 4, 1};
    std::vector<int32_t> len(B, kPoison32), nodes(B * L, kPoison32);
    std::vector<int64_t> bonus(B, kPoison64);
    CHECK(trtspec::cpu::verifyGreedy(tokens.data(), parents.data(), logits.data(), DType::kFloat32, numNodes, B, N,
                                     V, L - 1, len.data(), nodes.data(), bonus.data()) == Status::kSuccess);
    CHECK((len == std::vector<int32_t>{1, 0, 0}));
    CHECK((bonus == std::vector<int64_t>{2, 4, 2}));
    CHECK((nodes == std::vector<int32_t>{0, 2, -1, -1, -1, -1, 0, -1, -1, -1, -1, -1, 0, -1, -1, -1, -1, -1}));

    auto run = [&](const std::vector<int64_t>& tok, const std::vector<int32_t>& par, int32_t maxDepth,
                   const int32_t* nn = nullptr) {
        return trtspec::cpu::verifyGreedy(tok.data(), par.data(), logits.data(), DType::kFloat32, nn, B, N, V,
                                          maxDepth, len.data(), nodes.data(), bonus.data());
    };
    std::vector<int64_t> badTok = tokens;
    badTok[5] = V;
    CHECK(run(badTok, parents, L - 1) == Status::kInvalidToken);
    badTok[5] = -1;
    CHECK(run(badTok, parents, L - 1) == Status::kInvalidToken);
    badTok = tokens;
    badTok[10] = 99;  // a padding node of request 2: ignored
    CHECK(run(badTok, parents, L - 1, numNodes) == Status::kSuccess);
    CHECK(run(tokens, parents, 2) == Status::kTreeTooDeep);   // request 1 is a chain of depth 3
    CHECK(run(tokens, parents, 3) == Status::kSuccess);
    std::vector<int32_t> badPar = parents;
    badPar[7] = 7;
    CHECK(run(tokens, badPar, L - 1) == Status::kInvalidTree);
    CHECK(run(tokens, parents, -1) == Status::kInvalidArgument);
    CHECK(trtspec::cpu::verifyGreedy(tokens.data(), parents.data(), logits.data(), DType::kFloat32, nullptr, B, N, 0,
                                     L - 1, len.data(), nodes.data(), bonus.data()) == Status::kInvalidArgument);
    CHECK(trtspec::cpu::verifyGreedy(tokens.data(), parents.data(), logits.data(), static_cast<DType>(9), nullptr, B,
                                     N, V, L - 1, len.data(), nodes.data(), bonus.data()) == Status::kInvalidArgument);
}

static void testSampleEqualDistributionsAcceptEverything() {
    // p == q: every draft accepted (u * q(x) < p(x) for u < 1); the bonus comes from p at the leaf
    const int32_t B = 4, N = 5, D = N - 1;
    const int64_t V = 16;
    std::vector<float> probs(B * N * V), draft(B * D * V);
    for (int32_t r = 0; r < B * N; ++r)
        for (int64_t v = 0; v < V; ++v) probs[r * V + v] = (v == r % V || v == (r + 3) % V) ? 0.5f : 0.0f;
    std::vector<int32_t> parents(B * N), tokens(B * D);  // int32 draft tokens
    for (int32_t b = 0; b < B; ++b)
        for (int32_t i = 0; i < N; ++i) {
            parents[b * N + i] = i - 1;
            if (i == 0) continue;
            tokens[b * D + i - 1] = (b * N + i - 1) % V;  // in the support of the parent's row
            std::copy(&probs[(b * N + i - 1) * V], &probs[(b * N + i) * V], &draft[(b * D + i - 1) * V]);
        }
    const std::vector<int64_t> seed(B, 99), offset(B, 7);
    for (bool wor : {false, true}) {
        std::vector<int32_t> len(B, kPoison32), nodes(B * N, kPoison32);
        std::vector<int64_t> bonus(B, kPoison64);
        CHECK(trtspec::cpu::verifySample(tokens.data(), parents.data(), probs.data(), draft.data(), nullptr,
                                         seed.data(), offset.data(), B, D, V, N - 1, wor, len.data(), nodes.data(),
                                         bonus.data()) == Status::kSuccess);
        for (int32_t b = 0; b < B; ++b) {
            CHECK(len[b] == N - 1);
            for (int32_t i = 0; i < N; ++i) CHECK(nodes[b * N + i] == i);
            const int32_t leafRow = b * N + N - 1;
            CHECK(bonus[b] == leafRow % V || bonus[b] == (leafRow + 3) % V);
        }
    }
    // ragged: request b uses b drafts (the rest is never read: poison it)
    std::vector<int32_t> lens{0, 1, 2, 3};
    std::vector<int32_t> padded = tokens;
    for (int32_t b = 0; b < B; ++b)
        for (int32_t j = lens[b]; j < D; ++j) padded[b * D + j] = -7;
    std::vector<int32_t> len(B), nodes(B * N);
    std::vector<int64_t> bonus(B);
    CHECK(trtspec::cpu::verifySample(padded.data(), parents.data(), probs.data(), draft.data(), lens.data(), seed.data(),
                                     offset.data(), B, D, V, N - 1, false, len.data(), nodes.data(), bonus.data()) ==
          Status::kSuccess);
    for (int32_t b = 0; b < B; ++b) CHECK(len[b] == lens[b] && nodes[b * N + lens[b]] == lens[b]);
    lens[2] = D + 1;
    CHECK(trtspec::cpu::verifySample(padded.data(), parents.data(), probs.data(), draft.data(), lens.data(), seed.data(),
                                     offset.data(), B, D, V, N - 1, false, len.data(), nodes.data(), bonus.data()) ==
          Status::kInvalidDraftLen);
    // NaN at a value the walk reads, and an all-zero target row: errors, never out-of-bounds reads
    std::vector<float> bad = probs;
    bad[0 * V + tokens[0]] = NAN;
    CHECK(trtspec::cpu::verifySample(tokens.data(), parents.data(), bad.data(), draft.data(), nullptr, seed.data(),
                                     offset.data(), B, D, V, N - 1, false, len.data(), nodes.data(), bonus.data()) ==
          Status::kInvalidProbability);
    std::vector<float> zeros(B * N * V, 0.0f);
    CHECK(trtspec::cpu::verifySample(tokens.data(), parents.data(), zeros.data(), draft.data(), nullptr, seed.data(),
                                     offset.data(), B, D, V, N - 1, true, len.data(), nodes.data(), bonus.data()) ==
          Status::kInvalidProbability);
    std::vector<int64_t> badTok(tokens.begin(), tokens.end());  // int64 ids
    badTok[D + 2] = V + 1000000;
    CHECK(trtspec::cpu::verifySample(badTok.data(), parents.data(), probs.data(), draft.data(), nullptr, seed.data(),
                                     offset.data(), B, D, V, N - 1, false, len.data(), nodes.data(), bonus.data()) ==
          Status::kInvalidToken);
    CHECK(trtspec::cpu::verifySample(badTok.data(), parents.data(), probs.data(), draft.data(), nullptr, nullptr,
                                     offset.data(), B, D, V, N - 1, false, len.data(), nodes.data(), bonus.data()) ==
          Status::kInvalidArgument);  // no seeds
}

static void testBlock() {
    // p == q on a chain of D: tau = D always
    const int32_t B = 3, D = 4;
    const int64_t V = 8;
    std::vector<float> target(B * (D + 1) * V, 1.0f / V), draft(B * D * V, 1.0f / V);
    std::vector<int64_t> tokens(B * D);
    for (auto& t : tokens) t = next32() % V;
    const std::vector<int64_t> seed{5, 5, -5}, offset{6, 7, 8};
    std::vector<int32_t> len(B, kPoison32);
    std::vector<int64_t> bonus(B, kPoison64);
    CHECK(trtspec::cpu::verifyBlock(tokens.data(), target.data(), draft.data(), nullptr, seed.data(), offset.data(), B,
                                    D, V, len.data(), bonus.data()) == Status::kSuccess);
    for (int32_t b = 0; b < B; ++b) CHECK(len[b] == D && bonus[b] >= 0 && bonus[b] < V);
    // ragged: tau = draft_lens[b]; padding tokens are never read
    const std::vector<int32_t> lens{2, 0, 4};
    tokens[2] = tokens[3] = -1;
    CHECK(trtspec::cpu::verifyBlock(tokens.data(), target.data(), draft.data(), lens.data(), seed.data(),
                                    offset.data(), B, D, V, len.data(), bonus.data()) == Status::kSuccess);
    for (int32_t b = 0; b < B; ++b) CHECK(len[b] == lens[b]);
    const std::vector<int32_t> badLens{2, 5, 4};
    CHECK(trtspec::cpu::verifyBlock(tokens.data(), target.data(), draft.data(), badLens.data(), seed.data(),
                                    offset.data(), B, D, V, len.data(), bonus.data()) == Status::kInvalidDraftLen);
    // D=1, V=2: p = [1, 0], q = [0, 1], draft token 1: w_1 = 0, tau = 0, bonus from max(p - q, 0) = [1, 0]
    const float t2[4] = {1.0f, 0.0f, 0.5f, 0.5f}, d2[2] = {0.0f, 1.0f};
    const int32_t tok2[1] = {1};
    const int64_t s2[1] = {0}, o2[1] = {0};
    int32_t l2 = kPoison32;
    int64_t b2 = kPoison64;
    CHECK(trtspec::cpu::verifyBlock(tok2, t2, d2, nullptr, s2, o2, 1, 1, 2, &l2, &b2) == Status::kSuccess);
    CHECK(l2 == 0 && b2 == 0);
    const int32_t badTok[1] = {2};
    CHECK(trtspec::cpu::verifyBlock(badTok, t2, d2, nullptr, s2, o2, 1, 1, 2, &l2, &b2) == Status::kInvalidToken);
    const float dNeg[2] = {-0.5f, 1.5f};
    CHECK(trtspec::cpu::verifyBlock(tok2, t2, dNeg, nullptr, s2, o2, 1, 1, 2, &l2, &b2) ==
          Status::kInvalidProbability);
    CHECK(trtspec::cpu::verifyBlock(tok2, t2, d2, nullptr, s2, o2, 1, trtspec::kMaxBlockDraft + 1, 2, &l2, &b2) ==
          Status::kInvalidArgument);
    // D = 0: the bonus comes from target row 0
    CHECK(trtspec::cpu::verifyBlock(static_cast<const int64_t*>(nullptr), t2, nullptr, nullptr, s2, o2, 1, 0, 2, &l2,
                                    &b2) == Status::kSuccess);
    CHECK(l2 == 0 && b2 == 0);
}

int main() {
    testConverters();
    testGreedyHalfPrecision(DType::kFloat16);
    testGreedyHalfPrecision(DType::kBFloat16);
    testGreedyPoisonAndErrors();
    testSampleEqualDistributionsAcceptEverything();
    testBlock();
    if (failures) std::fprintf(stderr, "test_verify: %d failure(s)\n", failures);
    else std::printf("test_verify: ok\n");
    return failures ? 1 : 0;
}
