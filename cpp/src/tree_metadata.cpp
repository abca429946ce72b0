// CPU launcher of tree_metadata: packed ancestor masks, depths and child lists (see reference.py).
#include <algorithm>

#include "cpu_common.h"

namespace trtspec {
namespace cpu {

Status treeMetadata(const int32_t* parents, const int32_t* numNodes, int32_t batch, int32_t nodes,
                    int32_t* packedMask, int32_t* depth, int32_t* firstChild, int32_t* nextSibling) {
    if (batch < 0 || batch > kMaxBatch || nodes < 1 || nodes > kMaxNodes) return Status::kInvalidArgument;
    if (batch > 0 && (!parents || !packedMask || !depth || !firstChild || !nextSibling))
        return Status::kInvalidArgument;
    const int32_t words = maskWords(nodes);
    const double work = static_cast<double>(batch) * nodes * (words + 4);
    return detail::parallelFor(batch, detail::numThreads(batch, work), [&](int32_t b0, int32_t b1) {
        std::vector<int32_t> last(nodes);
        for (int32_t b = b0; b < b1; ++b) {
            int32_t n = 0;
            Status s = detail::requestNodes(numNodes, b, nodes, &n);
            if (s != Status::kSuccess) return s;
            const int32_t* par = parents + static_cast<int64_t>(b) * nodes;
            int32_t* mask = packedMask + static_cast<int64_t>(b) * nodes * words;
            int32_t* dep = depth + static_cast<int64_t>(b) * nodes;
            int32_t* fc = firstChild + static_cast<int64_t>(b) * nodes;
            int32_t* ns = nextSibling + static_cast<int64_t>(b) * nodes;
            std::fill(mask, mask + static_cast<int64_t>(nodes) * words, 0);
            std::fill(dep, dep + nodes, 0);
            std::fill(fc, fc + nodes, -1);
            std::fill(ns, ns + nodes, -1);
            if (par[0] != -1) return Status::kInvalidTree;
            for (int32_t i = 0; i < n; ++i) {
                int32_t* row = mask + static_cast<int64_t>(i) * words;
                if (i > 0) {
                    const int32_t p = par[i];
                    if (p < 0 || p >= i) return Status::kInvalidTree;
                    const int32_t* prow = mask + static_cast<int64_t>(p) * words;
                    std::copy(prow, prow + p / 32 + 1, row);  // ancestors of i = ancestors of p ...
                    dep[i] = dep[p] + 1;
                    if (fc[p] < 0) {
                        fc[p] = i;
                    } else {
                        ns[last[p]] = i;
                    }
                    last[p] = i;
                }
                // ... plus i itself (bit 31 makes the int32 word negative, as in the reference)
                row[i / 32] = static_cast<int32_t>(static_cast<uint32_t>(row[i / 32]) | (1u << (i % 32)));
            }
        }
        return Status::kSuccess;
    });
}

}  // namespace cpu
}  // namespace trtspec
