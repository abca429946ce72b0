// CUDA launchers of verify_sample / verify_block that read (seed, offset) from device memory.
//
// Same semantics as trtspec::cuda::verifySample / verifyBlock (trtspec/kernels.h), except that
// seedOffset points to two int64 values in device memory, {seed, offset}, read by the kernel
// (reinterpreted as uint64). This keeps a step's random stream a graph input (TensorRT plugins,
// CUDA graphs) without a device-to-host copy. Torch-free; candidates for trtspec/kernels.h.
#pragma once
#include "trtspec/kernels.h"

namespace trtspec {
namespace cuda {

Status verifySampleSeedOnDevice(const int64_t* tokens, const int32_t* parents, const float* targetProbs,
                                const float* draftProbs, const int32_t* numNodes, int32_t batch, int32_t nodes,
                                int64_t vocab, int32_t maxDepth, const int64_t* seedOffset,
                                bool siblingsWithoutReplacement, int32_t* acceptedLen, int32_t* acceptedNodes,
                                int64_t* bonusToken, void* workspace, size_t workspaceBytes, cudaStream_t stream);

Status verifyBlockSeedOnDevice(const int64_t* draftTokens, const float* targetProbs, const float* draftProbs,
                               int32_t batch, int32_t draftLen, int64_t vocab, const int64_t* seedOffset,
                               int32_t* acceptedLen, int64_t* bonusToken, void* workspace, size_t workspaceBytes,
                               cudaStream_t stream);

}  // namespace cuda
}  // namespace trtspec
