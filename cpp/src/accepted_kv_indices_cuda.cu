// CUDA accepted_kv_indices: one thread per (request, path slot).
//
// Invalid request (accepted_len[b] outside [0, L-1]): src[b, :] = dst[b, :] = -1 and
// new_cache_lens[b] = cache_lens[b] (nothing is committed). Positions are computed with 32-bit
// wrap-around arithmetic; nothing is read through them.
#include "cuda_common.cuh"

namespace trtspec {
namespace cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    acceptedKvIndicesKernel(const int32_t* __restrict__ acceptedNodes, const int32_t* __restrict__ acceptedLen,
                            const int32_t* __restrict__ cacheLens, int32_t batch, int32_t L, int32_t* __restrict__ src,
                            int32_t* __restrict__ dst, int32_t* __restrict__ newCacheLens) {
    const int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
    if (idx >= static_cast<int64_t>(batch) * L) return;
    const int32_t b = static_cast<int32_t>(idx / L), i = static_cast<int32_t>(idx % L);
    const int32_t len = acceptedLen[b];
    const uint32_t base = static_cast<uint32_t>(cacheLens[b]);
    const bool valid = len >= 0 && len < L;
    if (valid && i <= len) {
        src[idx] = static_cast<int32_t>(base + static_cast<uint32_t>(acceptedNodes[idx]));
        dst[idx] = static_cast<int32_t>(base + static_cast<uint32_t>(i));
    } else {
        src[idx] = -1;
        dst[idx] = -1;
    }
    if (i == 0) newCacheLens[b] = static_cast<int32_t>(valid ? base + static_cast<uint32_t>(len) + 1u : base);
}

}  // namespace

Status acceptedKvIndices(const int32_t* acceptedNodes, const int32_t* acceptedLen, const int32_t* cacheLens,
                         int32_t batch, int32_t pathLen, int32_t* src, int32_t* dst, int32_t* newCacheLens,
                         cudaStream_t stream) {
    if (batch < 0 || batch > kMaxBatch || pathLen < 1 || pathLen > kMaxNodes + 1) return Status::kInvalidArgument;
    if (batch == 0) return Status::kSuccess;
    if (!acceptedNodes || !acceptedLen || !cacheLens || !src || !dst || !newCacheLens) return Status::kInvalidArgument;
    const int64_t total = static_cast<int64_t>(batch) * pathLen;
    const unsigned blocks = static_cast<unsigned>((total + kThreads - 1) / kThreads);
    acceptedKvIndicesKernel<<<blocks, kThreads, 0, stream>>>(acceptedNodes, acceptedLen, cacheLens, batch, pathLen, src,
                                                            dst, newCacheLens);
    return detail::checkLaunch();
}

}  // namespace cuda
}  // namespace trtspec
