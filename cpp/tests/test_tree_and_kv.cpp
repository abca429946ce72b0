// tree_metadata and accepted_kv_indices on the CPU: known trees, padding, poisoned outputs, error codes.
#include <cstdio>
#include <vector>

#include "trtspec/kernels.h"

using trtspec::Status;
static int failures = 0;
#define CHECK(cond)                                                                         \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);   \
            ++failures;                                                                     \
        }                                                                                   \
    } while (0)

constexpr int32_t kPoison = 0x5A5A5A5A;

struct Meta {
    std::vector<int32_t> mask, depth, fc, ns;
    Meta(int32_t B, int32_t N)
        : mask(B * N * trtspec::maskWords(N), kPoison), depth(B * N, kPoison), fc(B * N, kPoison), ns(B * N, kPoison) {}
    Status run(const std::vector<int32_t>& parents, const int32_t* numNodes, int32_t B, int32_t N) {
        return trtspec::cpu::treeMetadata(parents.data(), numNodes, B, N, mask.data(), depth.data(), fc.data(),
                                          ns.data());
    }
    bool poisoned() const {
        for (auto* v : {&mask, &depth, &fc, &ns})
            for (int32_t x : *v)
                if (x == kPoison) return true;
        return false;
    }
};

static void testSmallTree() {
    //        0
    //      / | \.
    //     1  2  5
    //    / \    |
    //   3   4   6
    const std::vector<int32_t> parents = {-1, 0, 0, 1, 1, 0, 5};
    Meta m(1, 7);
    CHECK(m.run(parents, nullptr, 1, 7) == Status::kSuccess);
    CHECK(!m.poisoned());
    const std::vector<int32_t> mask = {0b1, 0b11, 0b101, 0b1011, 0b10011, 0b100001, 0b1100001};
    const std::vector<int32_t> depth = {0, 1, 1, 2, 2, 1, 2};
    const std::vector<int32_t> fc = {1, 3, -1, -1, -1, 6, -1};
    const std::vector<int32_t> ns = {-1, 2, 5, 4, -1, -1, -1};
    CHECK(m.mask == mask);
    CHECK(m.depth == depth);
    CHECK(m.fc == fc);
    CHECK(m.ns == ns);
}

static void testChainOf40WithPadding() {
    // request 0: chain of 40 nodes (two mask words, bit 31 makes word 0 negative);
    // request 1: the same parents, num_nodes = 3 (rows 3.. are padding: 0 / -1)
    const int32_t N = 40, W = trtspec::maskWords(N);
    std::vector<int32_t> parents(2 * N);
    for (int32_t b = 0; b < 2; ++b)
        for (int32_t i = 0; i < N; ++i) parents[b * N + i] = i - 1;
    parents[N + 10] = 77;  // garbage in a padding row is ignored
    const int32_t numNodes[2] = {N, 3};
    Meta m(2, N);
    CHECK(m.run(parents, numNodes, 2, N) == Status::kSuccess);
    CHECK(!m.poisoned());
    CHECK(m.mask[31 * W + 0] == -1);  // row 31: bits 0..31 all set
    CHECK(m.mask[31 * W + 1] == 0);
    CHECK(m.mask[39 * W + 0] == -1 && m.mask[39 * W + 1] == 0xFF);
    CHECK(m.depth[39] == 39 && m.fc[38] == 39 && m.fc[39] == -1);
    CHECK(m.mask[(N + 2) * W] == 0b111 && m.depth[N + 2] == 2);
    for (int32_t i = 3; i < N; ++i) {
        CHECK(m.mask[(N + i) * W] == 0 && m.mask[(N + i) * W + 1] == 0);
        CHECK(m.depth[N + i] == 0 && m.fc[N + i] == -1 && m.ns[N + i] == -1);
    }
}

static void testTreeErrors() {
    Meta m(1, 3);
    CHECK(m.run({0, 0, 1}, nullptr, 1, 3) == Status::kInvalidTree);    // root parent must be -1
    CHECK(m.run({-1, 0, 2}, nullptr, 1, 3) == Status::kInvalidTree);   // parent not before child
    CHECK(m.run({-1, -1, 0}, nullptr, 1, 3) == Status::kInvalidTree);  // negative parent
    CHECK(m.run({-1, 0, 9}, nullptr, 1, 3) == Status::kInvalidTree);   // out of range
    int32_t zero = 0, four = 4;
    CHECK(m.run({-1, 0, 1}, &zero, 1, 3) == Status::kInvalidTree);
    CHECK(m.run({-1, 0, 1}, &four, 1, 3) == Status::kInvalidTree);
    CHECK(m.run({-1, 0, 1}, nullptr, -1, 3) == Status::kInvalidArgument);
    CHECK(trtspec::cpu::treeMetadata(nullptr, nullptr, 1, 3, m.mask.data(), m.depth.data(), m.fc.data(),
                                     m.ns.data()) == Status::kInvalidArgument);
    std::vector<int32_t> big(trtspec::kMaxNodes + 1, 0);
    CHECK(m.run(big, nullptr, 1, trtspec::kMaxNodes + 1) == Status::kInvalidArgument);
    CHECK(m.run({}, nullptr, 0, 3) == Status::kSuccess);  // empty batch
    CHECK(trtspec::statusString(Status::kInvalidTree) != nullptr);
    CHECK(trtspec::statusString(static_cast<Status>(99)) != nullptr);
}

static void testKvIndices() {
    const int32_t B = 2, L = 4;
    const std::vector<int32_t> nodes = {0, 2, 5, -1, 0, -1, -1, -1};
    const std::vector<int32_t> len = {2, 0}, cache = {100, 7};
    std::vector<int32_t> src(B * L, kPoison), dst(B * L, kPoison), newLens(B, kPoison);
    CHECK(trtspec::cpu::acceptedKvIndices(nodes.data(), len.data(), cache.data(), B, L, src.data(), dst.data(),
                                          newLens.data()) == Status::kSuccess);
    CHECK((src == std::vector<int32_t>{100, 102, 105, -1, 7, -1, -1, -1}));
    CHECK((dst == std::vector<int32_t>{100, 101, 102, -1, 7, -1, -1, -1}));
    CHECK((newLens == std::vector<int32_t>{103, 8}));
    const std::vector<int32_t> tooLong = {4, 0};
    CHECK(trtspec::cpu::acceptedKvIndices(nodes.data(), tooLong.data(), cache.data(), B, L, src.data(), dst.data(),
                                          newLens.data()) == Status::kInvalidArgument);
    const std::vector<int32_t> negCache = {-1, 0};
    CHECK(trtspec::cpu::acceptedKvIndices(nodes.data(), len.data(), negCache.data(), B, L, src.data(), dst.data(),
                                          newLens.data()) == Status::kInvalidArgument);
    const std::vector<int32_t> badNode = {0, -3, 5, -1, 0, -1, -1, -1};
    CHECK(trtspec::cpu::acceptedKvIndices(badNode.data(), len.data(), cache.data(), B, L, src.data(), dst.data(),
                                          newLens.data()) == Status::kInvalidArgument);
    const std::vector<int32_t> huge = {2147483640, 0};
    CHECK(trtspec::cpu::acceptedKvIndices(nodes.data(), len.data(), huge.data(), B, L, src.data(), dst.data(),
                                          newLens.data()) == Status::kSuccess);  // 2147483640 + 5 fits
    const std::vector<int32_t> overflow = {2147483645, 0};
    CHECK(trtspec::cpu::acceptedKvIndices(nodes.data(), len.data(), overflow.data(), B, L, src.data(), dst.data(),
                                          newLens.data()) == Status::kInvalidArgument);
}

int main() {
    testSmallTree();
    testChainOf40WithPadding();
    testTreeErrors();
    testKvIndices();
    if (failures) std::fprintf(stderr, "test_tree_and_kv: %d failure(s)\n", failures);
    else std::printf("test_tree_and_kv: ok\n");
    return failures ? 1 : 0;
}
