// CPU launcher of accepted_kv_indices: where to move the accepted path's KV entries (reference.py).
#include <climits>

#include "cpu_common.h"

namespace trtspec {
namespace cpu {

Status acceptedKvIndices(const int32_t* acceptedNodes, const int32_t* acceptedLen, const int32_t* cacheLens,
                         int32_t batch, int32_t pathLen, int32_t* src, int32_t* dst, int32_t* newCacheLens) {
    if (batch < 0 || batch > kMaxBatch || pathLen < 1 || pathLen > kMaxNodes) return Status::kInvalidArgument;
    if (batch > 0 && (!acceptedNodes || !acceptedLen || !cacheLens || !src || !dst || !newCacheLens))
        return Status::kInvalidArgument;
    for (int32_t b = 0; b < batch; ++b) {
        const int64_t row = static_cast<int64_t>(b) * pathLen;
        std::fill(src + row, src + row + pathLen, -1);
        std::fill(dst + row, dst + row + pathLen, -1);
        newCacheLens[b] = 0;
        const int32_t len = acceptedLen[b];
        const int64_t base = cacheLens[b];
        if (len < 0 || len >= pathLen || base < 0 || base + len + 1 > INT32_MAX) return Status::kInvalidArgument;
        for (int32_t i = 0; i <= len; ++i) {
            const int64_t node = acceptedNodes[row + i];
            if (node < 0 || base + node > INT32_MAX) return Status::kInvalidArgument;
            src[row + i] = static_cast<int32_t>(base + node);
            dst[row + i] = static_cast<int32_t>(base + i);
        }
        newCacheLens[b] = static_cast<int32_t>(base + len + 1);
    }
    return Status::kSuccess;
}

}  // namespace cpu
}  // namespace trtspec
