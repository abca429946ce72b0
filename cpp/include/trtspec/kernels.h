// trtspec draft-verification kernels: torch-free launchers on raw pointers.
//
// Every op has a CPU launcher (namespace trtspec::cpu, cpp/src/*.cpp) and a CUDA launcher with the
// same arguments plus an explicit stream (namespace trtspec::cuda, cpp/src/*.cu). Semantics are
// those of trtspec/reference.py, which is the specification; shapes below use its names.
// All tensors are dense, row-major and contiguous. Launchers validate sizes and return a Status
// instead of throwing; the CPU path also validates tree structure, token ids and probabilities
// (the CUDA path clamps what it reads, so no input can make it read or write out of bounds, and
// reports invalid data through a status word in device memory where the op has one).
#pragma once
#include <cstddef>
#include <cstdint>

#include "trtspec/status.h"

#ifndef __CUDACC__
typedef struct CUstream_st* cudaStream_t;  // same declaration as cuda_runtime_api.h
#endif

namespace trtspec {

// Documented limits (checked by every launcher and binding).
constexpr int32_t kMaxBatch = 1 << 20;
constexpr int32_t kMaxNodes = 4096;      // N, nodes per tree including the root (verifySample: D + 1)
constexpr int32_t kMaxBlockDraft = 1024; // D for verify_block

enum class DType : int32_t { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

inline int32_t maskWords(int32_t numNodes) { return (numNodes + 31) / 32; }

namespace cpu {

// parents int32 [B,N]; numNodes int32 [B] or nullptr (= N for all);
// packedMask int32 [B,N,ceil(N/32)], depth/firstChild/nextSibling int32 [B,N].
Status treeMetadata(const int32_t* parents, const int32_t* numNodes, int32_t batch, int32_t nodes,
                    int32_t* packedMask, int32_t* depth, int32_t* firstChild, int32_t* nextSibling);

// tokens int64 [B,N]; parents int32 [B,N]; logits [B,N,V] of `dtype`; numNodes [B] or nullptr;
// acceptedLen int32 [B]; acceptedNodes int32 [B,maxDepth+1]; bonusToken int64 [B].
Status verifyGreedy(const int64_t* tokens, const int32_t* parents, const void* logits, DType dtype,
                    const int32_t* numNodes, int32_t batch, int32_t nodes, int64_t vocab, int32_t maxDepth,
                    int32_t* acceptedLen, int32_t* acceptedNodes, int64_t* bonusToken);

// The sampled verifiers share one layout (see trtspec/ops.py, verify_sample):
//   draftTokens [B,D] int32 or int64 (draft j = tree node j+1; the root is not passed);
//   targetProbs float32 [B,D+1,V] (row i: the target after node i); draftProbs float32 [B,D,V]
//   (row j: the distribution draft j was drawn from); draftLens int32 [B] in [0,D] or nullptr (= D);
//   seed, offset int64 [B]: request b's random stream (the same 64 bits unsigned). Request b's
//   uniforms depend on (seed[b], offset[b]) and its own tree only, never on b or B.
// verifySample: parents int32 [B,D+1]; acceptedLen int32 [B]; acceptedNodes int32 [B,maxDepth+1];
// bonusToken int64 [B].
Status verifySample(const int32_t* draftTokens, const int32_t* parents, const float* targetProbs,
                    const float* draftProbs, const int32_t* draftLens, const int64_t* seed, const int64_t* offset,
                    int32_t batch, int32_t draftLen, int64_t vocab, int32_t maxDepth,
                    bool siblingsWithoutReplacement, int32_t* acceptedLen, int32_t* acceptedNodes,
                    int64_t* bonusToken);
Status verifySample(const int64_t* draftTokens, const int32_t* parents, const float* targetProbs,
                    const float* draftProbs, const int32_t* draftLens, const int64_t* seed, const int64_t* offset,
                    int32_t batch, int32_t draftLen, int64_t vocab, int32_t maxDepth,
                    bool siblingsWithoutReplacement, int32_t* acceptedLen, int32_t* acceptedNodes,
                    int64_t* bonusToken);

// verifyBlock: a chain per request; acceptedLen int32 [B]; bonusToken int64 [B].
Status verifyBlock(const int32_t* draftTokens, const float* targetProbs, const float* draftProbs,
                   const int32_t* draftLens, const int64_t* seed, const int64_t* offset, int32_t batch,
                   int32_t draftLen, int64_t vocab, int32_t* acceptedLen, int64_t* bonusToken);
Status verifyBlock(const int64_t* draftTokens, const float* targetProbs, const float* draftProbs,
                   const int32_t* draftLens, const int64_t* seed, const int64_t* offset, int32_t batch,
                   int32_t draftLen, int64_t vocab, int32_t* acceptedLen, int64_t* bonusToken);

// acceptedNodes int32 [B,L]; acceptedLen, cacheLens int32 [B];
// src, dst int32 [B,L]; newCacheLens int32 [B].
Status acceptedKvIndices(const int32_t* acceptedNodes, const int32_t* acceptedLen, const int32_t* cacheLens,
                         int32_t batch, int32_t pathLen, int32_t* src, int32_t* dst, int32_t* newCacheLens);

}  // namespace cpu

namespace cuda {

// Bytes of device workspace each launcher needs (0 where none); pass at least that many bytes,
// 256-byte aligned, as `workspace`.
size_t verifySampleWorkspaceSize(int32_t batch, int64_t vocab);
size_t verifyBlockWorkspaceSize(int32_t batch, int32_t draftLen, int64_t vocab);

Status treeMetadata(const int32_t* parents, const int32_t* numNodes, int32_t batch, int32_t nodes,
                    int32_t* packedMask, int32_t* depth, int32_t* firstChild, int32_t* nextSibling,
                    cudaStream_t stream);

Status verifyGreedy(const int64_t* tokens, const int32_t* parents, const void* logits, DType dtype,
                    const int32_t* numNodes, int32_t batch, int32_t nodes, int64_t vocab, int32_t maxDepth,
                    int32_t* acceptedLen, int32_t* acceptedNodes, int64_t* bonusToken, cudaStream_t stream);

// The sampled verifiers with the CPU launchers' arguments, every pointer (seed and offset
// included) in device memory, so a step's random streams can be graph inputs (TensorRT plugins,
// CUDA graphs) without a device-to-host copy.
Status verifySample(const int32_t* draftTokens, const int32_t* parents, const float* targetProbs,
                    const float* draftProbs, const int32_t* draftLens, const int64_t* seed, const int64_t* offset,
                    int32_t batch, int32_t draftLen, int64_t vocab, int32_t maxDepth,
                    bool siblingsWithoutReplacement, int32_t* acceptedLen, int32_t* acceptedNodes,
                    int64_t* bonusToken, void* workspace, size_t workspaceBytes, cudaStream_t stream);
Status verifySample(const int64_t* draftTokens, const int32_t* parents, const float* targetProbs,
                    const float* draftProbs, const int32_t* draftLens, const int64_t* seed, const int64_t* offset,
                    int32_t batch, int32_t draftLen, int64_t vocab, int32_t maxDepth,
                    bool siblingsWithoutReplacement, int32_t* acceptedLen, int32_t* acceptedNodes,
                    int64_t* bonusToken, void* workspace, size_t workspaceBytes, cudaStream_t stream);

Status verifyBlock(const int32_t* draftTokens, const float* targetProbs, const float* draftProbs,
                   const int32_t* draftLens, const int64_t* seed, const int64_t* offset, int32_t batch,
                   int32_t draftLen, int64_t vocab, int32_t* acceptedLen, int64_t* bonusToken, void* workspace,
                   size_t workspaceBytes, cudaStream_t stream);
Status verifyBlock(const int64_t* draftTokens, const float* targetProbs, const float* draftProbs,
                   const int32_t* draftLens, const int64_t* seed, const int64_t* offset, int32_t batch,
                   int32_t draftLen, int64_t vocab, int32_t* acceptedLen, int64_t* bonusToken, void* workspace,
                   size_t workspaceBytes, cudaStream_t stream);

Status acceptedKvIndices(const int32_t* acceptedNodes, const int32_t* acceptedLen, const int32_t* cacheLens,
                         int32_t batch, int32_t pathLen, int32_t* src, int32_t* dst, int32_t* newCacheLens,
                         cudaStream_t stream);

}  // namespace cuda
}  // namespace trtspec
