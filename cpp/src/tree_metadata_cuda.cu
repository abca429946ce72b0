// CUDA tree_metadata: one block per request, threads over its nodes.
//
// Invalid request (num_nodes[b] outside [1, N], parents[0] != -1, or parents[i] outside [0, i)):
// every row of that request is written with mask 0, depth -1, first_child -1, next_sibling -1
// (depth -1 never occurs for a valid tree, so callers can detect it).
#include "cuda_common.cuh"

namespace trtspec {
namespace cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    treeMetadataKernel(const int32_t* __restrict__ parents, const int32_t* __restrict__ numNodes, int32_t N,
                       int32_t* __restrict__ packedMask, int32_t* __restrict__ depth,
                       int32_t* __restrict__ firstChild, int32_t* __restrict__ nextSibling) {
    extern __shared__ int32_t shared[];
    int32_t* sParents = shared;       // [N]
    int32_t* sFirstChild = shared + N;  // [N]
    const int32_t b = blockIdx.x;
    const int32_t W = (N + 31) / 32;  // maskWords(N), which is host-only
    const int32_t n = numNodes != nullptr ? numNodes[b] : N;
    const bool nOk = n >= 1 && n <= N;
    const bool valid = detail::loadTree<kThreads>(parents + static_cast<size_t>(b) * N, nullptr, nOk ? n : 0, 1,
                                                  sParents) && nOk;

    int32_t* mask = packedMask + static_cast<size_t>(b) * N * W;
    int32_t* dep = depth + static_cast<size_t>(b) * N;
    int32_t* fc = firstChild + static_cast<size_t>(b) * N;
    int32_t* ns = nextSibling + static_cast<size_t>(b) * N;

    if (!valid) {
        for (int32_t i = threadIdx.x; i < N * W; i += kThreads) mask[i] = 0;
        for (int32_t i = threadIdx.x; i < N; i += kThreads) {
            dep[i] = -1;
            fc[i] = -1;
            ns[i] = -1;
        }
        return;  // block-uniform
    }

    for (int32_t i = threadIdx.x; i < n; i += kThreads) sFirstChild[i] = INT32_MAX;
    __syncthreads();
    for (int32_t i = 1 + threadIdx.x; i < n; i += kThreads) atomicMin(&sFirstChild[sParents[i]], i);
    __syncthreads();

    for (int32_t i = threadIdx.x; i < N; i += kThreads) {
        int32_t* row = mask + static_cast<size_t>(i) * W;
        if (i >= n) {  // padding rows
            for (int32_t w = 0; w < W; ++w) row[w] = 0;
            dep[i] = 0;
            fc[i] = -1;
            ns[i] = -1;
            continue;
        }
        // Ancestors have strictly decreasing indices, so the row's words fill from high to low:
        // keep the current word in a register and write each word exactly once.
        const int32_t top = i >> 5;
        for (int32_t w = top + 1; w < W; ++w) row[w] = 0;
        int32_t word = top;
        uint32_t bits = 0;
        int32_t d = -1;
        for (int32_t a = i; a >= 0; a = sParents[a]) {
            ++d;
            const int32_t aw = a >> 5;
            while (word > aw) {
                row[word] = static_cast<int32_t>(bits);
                bits = 0;
                --word;
            }
            bits |= 1u << (a & 31);
        }
        row[word] = static_cast<int32_t>(bits);
        for (int32_t w = word - 1; w >= 0; --w) row[w] = 0;
        dep[i] = d;

        const int32_t first = sFirstChild[i];
        fc[i] = first == INT32_MAX ? -1 : first;
        int32_t next = -1;
        if (i > 0) {
            const int32_t p = sParents[i];
            for (int32_t j = i + 1; j < n; ++j) {
                if (sParents[j] == p) {
                    next = j;
                    break;
                }
            }
        }
        ns[i] = next;
    }
}

}  // namespace

Status treeMetadata(const int32_t* parents, const int32_t* numNodes, int32_t batch, int32_t nodes,
                    int32_t* packedMask, int32_t* depth, int32_t* firstChild, int32_t* nextSibling,
                    cudaStream_t stream) {
    if (batch < 0 || batch > kMaxBatch || nodes < 1 || nodes > kMaxNodes) return Status::kInvalidArgument;
    if (batch == 0) return Status::kSuccess;
    if (!parents || !packedMask || !depth || !firstChild || !nextSibling) return Status::kInvalidArgument;
    const size_t smem = 2 * sizeof(int32_t) * static_cast<size_t>(nodes);
    treeMetadataKernel<<<batch, kThreads, smem, stream>>>(parents, numNodes, nodes, packedMask, depth, firstChild,
                                                          nextSibling);
    return detail::checkLaunch();
}

}  // namespace cuda
}  // namespace trtspec
