// Runs the CUDA launchers (their kernel source under tests/cuda_emu/emu.h) against the CPU
// launchers on seeded random inputs: exact equality for tree_metadata, verify_greedy (fp32, fp16,
// bf16, misaligned rows) and accepted_kv_indices; exact on dyadic probabilities (every float64 sum
// exact) and agreement rates otherwise for verify_sample and verify_block; the documented verdict
// for invalid data. Prints one line per check group; exit status 1 on any failure.
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "trtspec/kernels.h"
#include "trtspec/kernels.h"

using namespace trtspec;

static int gFailures = 0;
#define CHECK(cond, ...)                                        \
    do {                                                        \
        if (!(cond)) {                                          \
            std::fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            std::fprintf(stderr, __VA_ARGS__);                  \
            std::fprintf(stderr, "\n");                         \
            ++gFailures;                                        \
        }                                                       \
    } while (0)

static std::mt19937_64 rng(12345);
static int32_t randint(int32_t lo, int32_t hi) { return std::uniform_int_distribution<int32_t>(lo, hi)(rng); }

static std::vector<int32_t> trees(int32_t B, int32_t N, bool chain) {
    std::vector<int32_t> p(static_cast<size_t>(B) * N);
    for (int32_t b = 0; b < B; ++b) {
        p[b * N] = -1;
        for (int32_t i = 1; i < N; ++i) p[b * N + i] = chain ? i - 1 : randint(std::max(0, i - 4), i - 1);
    }
    return p;
}

// float -> 16-bit storage of fp16 / bf16 (via the CUDA host conversions)
static uint16_t toBits(float x, DType t) {
    uint16_t bits;
    if (t == DType::kFloat16) {
        __half h = __float2half(x);
        std::memcpy(&bits, &h, 2);
    } else {
        __nv_bfloat16 h = __float2bfloat16(x);
        std::memcpy(&bits, &h, 2);
    }
    return bits;
}

static void testTreeMetadata() {
    int groups = 0;
    for (int32_t N : {1, 2, 5, 33, 64}) {
        for (bool chain : {true, false}) {
            for (bool withNum : {false, true}) {
                const int32_t B = 3, W = maskWords(N);
                auto parents = trees(B, N, chain);
                std::vector<int32_t> num(B);
                for (auto& n : num) n = randint(1, N);
                const int32_t* nn = withNum ? num.data() : nullptr;
                std::vector<int32_t> m1(B * N * W, 7), d1(B * N, 7), f1(B * N, 7), s1(B * N, 7);
                std::vector<int32_t> m2(B * N * W, 9), d2(B * N, 9), f2(B * N, 9), s2(B * N, 9);
                CHECK(cpu::treeMetadata(parents.data(), nn, B, N, m1.data(), d1.data(), f1.data(), s1.data()) ==
                          Status::kSuccess, "cpu");
                CHECK(cuda::treeMetadata(parents.data(), nn, B, N, m2.data(), d2.data(), f2.data(), s2.data(),
                                         nullptr) == Status::kSuccess, "cuda");
                CHECK(m1 == m2 && d1 == d2 && f1 == f2 && s1 == s2, "N=%d chain=%d num=%d", N, chain, withNum);
                ++groups;
            }
        }
    }
    // invalid: parent not before the node -> that request all depth -1, others intact
    const int32_t B = 2, N = 5;
    auto parents = trees(B, N, true);
    parents[N + 3] = 4;
    std::vector<int32_t> m(B * N, 1), d(B * N, 1), f(B * N, 1), s(B * N, 1);
    CHECK(cuda::treeMetadata(parents.data(), nullptr, B, N, m.data(), d.data(), f.data(), s.data(), nullptr) ==
              Status::kSuccess, "launch");
    bool ok = true;
    for (int i = 0; i < N; ++i) ok &= d[N + i] == -1 && m[N + i] == 0 && f[N + i] == -1 && s[N + i] == -1 && d[i] == i;
    CHECK(ok, "invalid tree verdict");
    std::printf("tree_metadata: %d configurations equal to the CPU; invalid tree verdict checked\n", groups);
}

static void testGreedy() {
    int groups = 0;
    for (DType t : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
        for (int32_t V : {7, 111, 1000}) {
            for (int32_t N : {1, 5, 33}) {
                for (bool chain : {true, false}) {
                    const int32_t B = 3, L = N;
                    auto parents = trees(B, N, chain);
                    std::vector<float> logits(static_cast<size_t>(B) * N * V);
                    for (auto& x : logits) x = static_cast<float>(randint(-3, 3));  // many ties
                    std::vector<int64_t> tokens(B * N);
                    for (int32_t b = 0; b < B; ++b)
                        for (int32_t i = 0; i < N; ++i) {
                            int32_t p = i ? parents[b * N + i] : 0;
                            const float* row = &logits[(static_cast<size_t>(b) * N + p) * V];
                            int32_t top = static_cast<int32_t>(std::max_element(row, row + V) - row);
                            tokens[b * N + i] = randint(0, 9) < 7 ? top : randint(0, V - 1);
                        }
                    std::vector<uint16_t> half(logits.size());
                    for (size_t i = 0; i < logits.size(); ++i) half[i] = toBits(logits[i], t);
                    const void* data = t == DType::kFloat32 ? static_cast<const void*>(logits.data()) : half.data();
                    std::vector<int32_t> num(B);
                    for (auto& n : num) n = randint(1, N);
                    const int32_t* nn = chain ? nullptr : num.data();
                    std::vector<int32_t> l1(B, 7), n1(B * L, 7), l2(B, 9), n2(B * L, 9);
                    std::vector<int64_t> b1(B, 7), b2(B, 9);
                    CHECK(cpu::verifyGreedy(tokens.data(), parents.data(), data, t, nn, B, N, V, L - 1, l1.data(),
                                            n1.data(), b1.data()) == Status::kSuccess, "cpu");
                    CHECK(cuda::verifyGreedy(tokens.data(), parents.data(), data, t, nn, B, N, V, L - 1, l2.data(),
                                             n2.data(), b2.data(), nullptr) == Status::kSuccess, "cuda");
                    CHECK(l1 == l2 && n1 == n2 && b1 == b2, "dtype=%d V=%d N=%d chain=%d", static_cast<int>(t), V, N,
                          chain);
                    ++groups;
                }
            }
        }
    }
    // invalid token id -> accepted_len 0, nodes -1, bonus -1 for that request only
    const int32_t B = 2, N = 3, V = 5;
    std::vector<int32_t> parents{-1, 0, 1, -1, 0, 1};
    std::vector<int64_t> tokens{0, 1, 2, 0, 1, 99};
    std::vector<float> logits(B * N * V, 0.0f);
    std::vector<int32_t> len(B, 7), nodes(B * N, 7);
    std::vector<int64_t> bonus(B, 7);
    CHECK(cuda::verifyGreedy(tokens.data(), parents.data(), logits.data(), DType::kFloat32, nullptr, B, N, V, N - 1,
                             len.data(), nodes.data(), bonus.data(), nullptr) == Status::kSuccess, "launch");
    CHECK(len[1] == 0 && bonus[1] == -1 && nodes[3] == -1 && nodes[4] == -1 && nodes[5] == -1, "invalid verdict");
    CHECK(len[0] == 0 && bonus[0] == 0 && nodes[0] == 0 && nodes[1] == -1, "valid neighbour (argmax 0, no match)");
    // a path longer than max_depth + 1 -> invalid verdict
    std::vector<int64_t> chainTokens{0, 0, 0};
    CHECK(cuda::verifyGreedy(chainTokens.data(), parents.data(), logits.data(), DType::kFloat32, nullptr, 1, N, V, 1,
                             len.data(), nodes.data(), bonus.data(), nullptr) == Status::kSuccess, "launch");
    CHECK(len[0] == 0 && bonus[0] == -1 && nodes[0] == -1 && nodes[1] == -1, "too deep verdict");
    std::printf("verify_greedy: %d configurations equal to the CPU (fp32/fp16/bf16); invalid verdicts checked\n",
                groups);
}

// rows of k/1024 summing exactly to 1
static std::vector<float> dyadic(size_t rows, int32_t V) {
    std::vector<float> out(rows * V);
    for (size_t r = 0; r < rows; ++r) {
        std::vector<int> c(V, 1);
        int left = 1024 - V;
        while (left > 0) {
            int k = randint(0, V - 1), add = std::min(left, randint(1, 64));
            c[k] += add;
            left -= add;
        }
        for (int32_t v = 0; v < V; ++v) out[r * V + v] = static_cast<float>(c[v] / 1024.0);
    }
    return out;
}
static std::vector<float> softmax(size_t rows, int32_t V) {
    std::normal_distribution<double> g(0.0, 2.0);
    std::vector<float> out(rows * V);
    for (size_t r = 0; r < rows; ++r) {
        double s = 0;
        std::vector<double> e(V);
        for (auto& x : e) s += (x = std::exp(g(rng)));
        for (int32_t v = 0; v < V; ++v) out[r * V + v] = static_cast<float>(e[v] / s);
    }
    return out;
}
static int64_t draw(const float* q, int32_t V) {
    double u = std::uniform_real_distribution<double>(0, 1)(rng), c = 0;
    for (int32_t v = 0; v < V; ++v)
        if ((c += q[v]) > u) return v;
    return V - 1;
}

// per-request streams: seeds with the top bit set on some requests, offsets differing per request
static std::vector<int64_t> streams(int32_t B, int64_t base) {
    std::vector<int64_t> out(B);
    for (int32_t b = 0; b < B; ++b) out[b] = base + b * 0x9E3779B97F4A7C15ll;
    return out;
}

static void testSample() {
    int exact = 0, total = 0, same = 0;
    for (bool dyad : {true, false}) {
        for (int32_t V : {7, 111, 3000}) {
            for (int32_t N : {1, 5, 9}) {
                for (bool chain : {true, false}) {
                    for (bool wor : {false, true}) {
                        const int32_t B = 3, L = N, D = N - 1;
                        auto parents = trees(B, N, chain);
                        auto p = dyad ? dyadic(B * N, V) : softmax(B * N, V);
                        auto nodeRows = dyad ? dyadic(B * N, V) : softmax(B * N, V);
                        std::vector<float> q(std::max(1, B * D) * static_cast<size_t>(V));
                        std::vector<int64_t> tokens(std::max(1, B * D), 0);
                        for (int32_t b = 0; b < B; ++b)
                            for (int32_t i = 1; i < N; ++i) {  // draft i-1 drawn from its parent's row
                                const float* row = &nodeRows[(static_cast<size_t>(b) * N + parents[b * N + i]) * V];
                                std::copy(row, row + V, &q[(static_cast<size_t>(b) * D + i - 1) * V]);
                                tokens[b * D + i - 1] = draw(row, V);
                            }
                        std::vector<int32_t> tokens32(tokens.begin(), tokens.end());
                        std::vector<int32_t> lens(B);
                        for (auto& d : lens) d = randint(0, D);
                        const int32_t* dl = chain ? nullptr : lens.data();
                        const size_t wsBytes = cuda::verifySampleWorkspaceSize(B, V);
                        void* ws = std::aligned_alloc(256, (wsBytes + 255) / 256 * 256);
                        for (int64_t seed : {0ll, 77ll}) {
                            const auto seeds = streams(B, seed), offsets = streams(B, 5);
                            std::vector<int32_t> l1(B), n1(B * L), l2(B), n2(B * L);
                            std::vector<int64_t> b1(B), b2(B);
                            CHECK(cpu::verifySample(tokens.data(), parents.data(), p.data(), q.data(), dl,
                                                    seeds.data(), offsets.data(), B, D, V, L - 1, wor, l1.data(),
                                                    n1.data(), b1.data()) == Status::kSuccess, "cpu");
                            CHECK(cuda::verifySample(tokens32.data(), parents.data(), p.data(), q.data(), dl,
                                                     seeds.data(), offsets.data(), B, D, V, L - 1, wor, l2.data(),
                                                     n2.data(), b2.data(), ws, wsBytes, nullptr) == Status::kSuccess,
                                  "cuda");
                            for (int32_t b = 0; b < B; ++b) {
                                bool eq = l1[b] == l2[b] && b1[b] == b2[b];
                                for (int32_t i = 0; i < L; ++i) eq &= n1[b * L + i] == n2[b * L + i];
                                same += eq;
                                ++total;
                                if (dyad) {
                                    CHECK(eq, "dyadic V=%d N=%d chain=%d wor=%d b=%d: len %d/%d bonus %lld/%lld", V, N,
                                          chain, wor, b, l1[b], l2[b], static_cast<long long>(b1[b]),
                                          static_cast<long long>(b2[b]));
                                    exact += eq;
                                }
                            }
                        }
                        std::free(ws);
                    }
                }
            }
        }
    }
    CHECK(same >= total * 0.97, "agreement %d/%d", same, total);
    // invalid draft_lens / draft token -> that request's invalid verdict only
    {
        const int32_t B = 3, N = 4, D = 3, V = 5;
        auto parents = trees(B, N, true);
        auto p = dyadic(B * N, V), q = dyadic(B * D, V);
        std::vector<int64_t> tokens{0, 1, 2, 0, 1, 2, 0, 9, 2};  // request 2: draft 1 outside [0, V)
        const std::vector<int32_t> lens{3, 4, 3};                 // request 1: draft_lens past D
        const auto seeds = streams(B, 1), offsets = streams(B, 2);
        std::vector<int32_t> len(B, 7), nodes(B * N, 7);
        std::vector<int64_t> bonus(B, 7);
        void* ws = std::aligned_alloc(256, 256 * 8);
        CHECK(cuda::verifySample(tokens.data(), parents.data(), p.data(), q.data(), lens.data(), seeds.data(),
                                 offsets.data(), B, D, V, N - 1, false, len.data(), nodes.data(), bonus.data(), ws,
                                 256 * 8, nullptr) == Status::kSuccess, "launch");
        std::free(ws);
        bool ok = bonus[0] >= 0 && nodes[0] == 0;
        for (int32_t b = 1; b < 3; ++b) {
            ok &= len[b] == 0 && bonus[b] == -1;
            for (int32_t i = 0; i < N; ++i) ok &= nodes[b * N + i] == -1;
        }
        CHECK(ok, "invalid sample verdicts");
    }
    std::printf("verify_sample: %d dyadic requests equal to the CPU; %d/%d requests equal overall; invalid verdicts "
                "checked\n", exact, same, total);
}

static void testBlock() {
    int exact = 0, total = 0, same = 0;
    for (bool dyad : {true, false}) {
        for (int32_t V : {7, 111, 3000}) {
            for (int32_t D : {0, 1, 4, 8}) {
                const int32_t B = 4;
                auto p = dyad ? dyadic(B * (D + 1), V) : softmax(B * (D + 1), V);
                auto q = dyad ? dyadic(std::max(1, B * D), V) : softmax(std::max(1, B * D), V);
                std::vector<int64_t> x(std::max(1, B * D));
                for (int32_t b = 0; b < B; ++b)
                    for (int32_t i = 0; i < D; ++i) {
                        const float* pr = &p[(static_cast<size_t>(b) * (D + 1) + i) * V];
                        const float* qr = &q[(static_cast<size_t>(b) * D + i) * V];
                        int64_t t = draw(qr, V);
                        if (dyad)  // keep every weight at 1 (p >= q at the drafts): residual sums stay exact
                            for (int k = 0; k < 64 && pr[t] < qr[t]; ++k) t = randint(0, V - 1);
                        if (dyad && pr[t] < qr[t]) t = static_cast<int64_t>(std::max_element(pr, pr + V) - pr);
                        x[b * D + i] = t;
                    }
                std::vector<int32_t> x32(x.begin(), x.end());
                std::vector<int32_t> lens(B);
                for (auto& d : lens) d = randint(0, D);
                for (int64_t seed : {1ll, 2ll, 3ll}) {
                    const int32_t* dl = seed == 2 ? lens.data() : nullptr;  // ragged in one of three runs
                    const auto seeds = streams(B, seed), offsets = streams(B, 9);
                    std::vector<int32_t> l1(B), l2(B);
                    std::vector<int64_t> b1(B), b2(B);
                    CHECK(cpu::verifyBlock(x.data(), p.data(), q.data(), dl, seeds.data(), offsets.data(), B, D, V,
                                           l1.data(), b1.data()) == Status::kSuccess, "cpu");
                    CHECK(cuda::verifyBlock(x32.data(), p.data(), q.data(), dl, seeds.data(), offsets.data(), B, D, V,
                                            l2.data(), b2.data(), nullptr, 0, nullptr) == Status::kSuccess, "cuda");
                    for (int32_t b = 0; b < B; ++b) {
                        const bool eq = l1[b] == l2[b] && b1[b] == b2[b];
                        same += eq;
                        ++total;
                        // exact where every weight is 1 (w p - q is then an exact float64 difference)
                        bool weightsOne = dyad;
                        for (int32_t i = 0; i < D && dyad; ++i) {
                            const size_t at = (static_cast<size_t>(b) * (D + 1) + i) * V + x[b * D + i];
                            const size_t atq = (static_cast<size_t>(b) * D + i) * V + x[b * D + i];
                            weightsOne &= p[at] >= q[atq];
                        }
                        if (weightsOne) {
                            CHECK(eq, "dyadic V=%d D=%d b=%d: tau %d/%d bonus %lld/%lld", V, D, b, l1[b], l2[b],
                                  static_cast<long long>(b1[b]), static_cast<long long>(b2[b]));
                            exact += eq;
                        }
                    }
                }
            }
        }
    }
    CHECK(same >= total * 0.97, "agreement %d/%d", same, total);
    // invalid draft token or draft_lens -> accepted_len 0, bonus -1; padding tokens are not read
    std::vector<int64_t> bad{0, 7, 0, 7, 0, 1};
    const std::vector<int32_t> lens{2, 1, 3};
    auto p = dyadic(9, 5), q = dyadic(6, 5);
    const auto seeds = streams(3, 0), offsets = streams(3, 0);
    std::vector<int32_t> len(3, 9);
    std::vector<int64_t> bonus(3, 9);
    CHECK(cuda::verifyBlock(bad.data(), p.data(), q.data(), lens.data(), seeds.data(), offsets.data(), 3, 2, 5,
                            len.data(), bonus.data(), nullptr, 0, nullptr) == Status::kSuccess, "launch");
    CHECK(len[0] == 0 && bonus[0] == -1 && bonus[1] >= 0 && len[2] == 0 && bonus[2] == -1, "invalid verdicts");
    std::printf("verify_block: %d requests with unit weights equal to the CPU; %d/%d equal overall; invalid verdicts "
                "checked\n", exact, same, total);
}

static void testKv() {
    const int32_t B = 40, L = 6;
    std::vector<int32_t> nodes(B * L, -1), len(B), cache(B);
    for (int32_t b = 0; b < B; ++b) {
        len[b] = randint(0, L - 1);
        cache[b] = randint(0, 100000);
        int32_t u = 0;
        for (int32_t i = 0; i <= len[b]; ++i) nodes[b * L + i] = (u += i ? randint(1, 3) : 0);
    }
    std::vector<int32_t> s1(B * L), d1(B * L), c1(B), s2(B * L, 5), d2(B * L, 5), c2(B, 5);
    CHECK(cpu::acceptedKvIndices(nodes.data(), len.data(), cache.data(), B, L, s1.data(), d1.data(), c1.data()) ==
              Status::kSuccess, "cpu");
    CHECK(cuda::acceptedKvIndices(nodes.data(), len.data(), cache.data(), B, L, s2.data(), d2.data(), c2.data(),
                                  nullptr) == Status::kSuccess, "cuda");
    CHECK(s1 == s2 && d1 == d2 && c1 == c2, "kv indices");
    len[3] = L;  // out of range -> row -1, cache length unchanged
    nodes[5 * L] = -2;
    len[5] = 0;
    CHECK(cuda::acceptedKvIndices(nodes.data(), len.data(), cache.data(), B, L, s2.data(), d2.data(), c2.data(),
                                  nullptr) == Status::kSuccess, "cuda");
    bool ok = c2[3] == cache[3] && c2[5] == cache[5];
    for (int32_t i = 0; i < L; ++i) ok &= s2[3 * L + i] == -1 && d2[5 * L + i] == -1;
    CHECK(ok, "invalid kv verdicts");
    std::printf("accepted_kv_indices: equal to the CPU; invalid verdicts checked\n");
}

int main(int argc, char** argv) {
    const std::string only = argc > 1 ? argv[1] : "";
    if (only.empty() || only == "tree") testTreeMetadata();
    if (only.empty() || only == "greedy") testGreedy();
    if (only.empty() || only == "sample") testSample();
    if (only.empty() || only == "block") testBlock();
    if (only.empty() || only == "kv") testKv();
    if (gFailures) {
        std::fprintf(stderr, "%d check(s) failed\n", gFailures);
        return 1;
    }
    std::printf("cuda_emu harness: all checks passed\n");
    return 0;
}
