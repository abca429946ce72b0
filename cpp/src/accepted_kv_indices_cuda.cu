// CUDA accepted_kv_indices: one warp per request, lanes over its path slots.
//
// Invalid request (accepted_len[b] outside [0, L-1], cache_lens[b] < 0, an accepted node < 0, or a
// position past INT32_MAX): src[b, :] = dst[b, :] = -1 and new_cache_lens[b] = cache_lens[b]
// (nothing is committed). The CPU launcher rejects the same inputs with kInvalidArgument.
#include "cuda_common.cuh"

namespace trtspec {
namespace cuda {
namespace {

constexpr int kWarps = 8;  // requests per block
constexpr int kThreads = 32 * kWarps;

__global__ void __launch_bounds__(kThreads)
    acceptedKvIndicesKernel(const int32_t* __restrict__ acceptedNodes, const int32_t* __restrict__ acceptedLen,
                            const int32_t* __restrict__ cacheLens, int32_t batch, int32_t L, int32_t* __restrict__ src,
                            int32_t* __restrict__ dst, int32_t* __restrict__ newCacheLens) {
    const int64_t b = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
    const int32_t lane = threadIdx.x % 32;
    if (b >= batch) return;  // warp-uniform
    const int32_t len = acceptedLen[b];
    const int64_t base = cacheLens[b];
    const int32_t* nodes = acceptedNodes + b * L;
    bool ok = len >= 0 && len < L && base >= 0 && base + len + 1 <= INT32_MAX;
    if (ok)
        for (int32_t i = lane; i <= len; i += 32) ok &= nodes[i] >= 0 && base + nodes[i] <= INT32_MAX;
    ok = __all_sync(0xffffffffu, ok);
    int32_t* s = src + b * L;
    int32_t* d = dst + b * L;
    for (int32_t i = lane; i < L; i += 32) {
        const bool on = ok && i <= len;
        s[i] = on ? static_cast<int32_t>(base + nodes[i]) : -1;
        d[i] = on ? static_cast<int32_t>(base + i) : -1;
    }
    if (lane == 0) newCacheLens[b] = ok ? static_cast<int32_t>(base + len + 1) : static_cast<int32_t>(base);
}

}  // namespace

Status acceptedKvIndices(const int32_t* acceptedNodes, const int32_t* acceptedLen, const int32_t* cacheLens,
                         int32_t batch, int32_t pathLen, int32_t* src, int32_t* dst, int32_t* newCacheLens,
                         cudaStream_t stream) {
    if (batch < 0 || batch > kMaxBatch || pathLen < 1 || pathLen > kMaxNodes) return Status::kInvalidArgument;
    if (batch == 0) return Status::kSuccess;
    if (!acceptedNodes || !acceptedLen || !cacheLens || !src || !dst || !newCacheLens) return Status::kInvalidArgument;
    const unsigned blocks = static_cast<unsigned>((batch + kWarps - 1) / kWarps);
    acceptedKvIndicesKernel<<<blocks, kThreads, 0, stream>>>(acceptedNodes, acceptedLen, cacheLens, batch, pathLen, src,
                                                            dst, newCacheLens);
    return detail::checkLaunch();
}

}  // namespace cuda
}  // namespace trtspec
