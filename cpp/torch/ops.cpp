// Torch bindings of the trtspec kernels: argument checks, output allocation, dispatch to the
// torch-free launchers (trtspec::cpu, or trtspec::cuda on the current stream). Errors are
// RuntimeErrors naming the op and the argument; launcher failures carry statusString.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>
#include <tuple>

#include "trtspec/kernels.h"
#include "trtspec/status.h"

#ifdef TRTSPEC_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace {

using at::Tensor;
using OptTensor = std::optional<Tensor>;

void checkStatus(const char* op, trtspec::Status s) {
    TORCH_CHECK(s == trtspec::Status::kSuccess, "trtspec::", op, ": ", trtspec::statusString(s));
}

void checkTensor(const char* op, const char* name, const Tensor& t, int64_t dim, at::ScalarType dtype,
                 const Tensor& like) {
    TORCH_CHECK(t.dim() == dim, "trtspec::", op, ": ", name, " must have ", dim, " dimensions, got shape ",
                t.sizes());
    TORCH_CHECK(t.scalar_type() == dtype, "trtspec::", op, ": ", name, " must be ", dtype, ", got ",
                t.scalar_type());
    TORCH_CHECK(t.device() == like.device(), "trtspec::", op, ": ", name, " must be on ", like.device(),
                ", got ", t.device());
    TORCH_CHECK(t.is_contiguous(), "trtspec::", op, ": ", name, " must be contiguous");
}

void checkSize(const char* op, const char* name, const Tensor& t, int64_t d, int64_t expected) {
    TORCH_CHECK(t.size(d) == expected, "trtspec::", op, ": ", name, ".shape[", d, "] must be ", expected, ", got ",
                t.size(d));
}

void checkDevice(const char* op, const Tensor& t) {
    TORCH_CHECK(t.device().is_cpu() || t.device().is_cuda(), "trtspec::", op, ": tensors must be on CPU or CUDA, got ",
                t.device());
}

int32_t checkBatchNodes(const char* op, const Tensor& parents, int64_t* nodesOut) {
    const int64_t B = parents.size(0), N = parents.size(1);
    TORCH_CHECK(B <= trtspec::kMaxBatch, "trtspec::", op, ": batch must be <= ", trtspec::kMaxBatch, ", got ", B);
    TORCH_CHECK(N >= 1 && N <= trtspec::kMaxNodes, "trtspec::", op, ": parents.shape[1] (N) must be in [1, ",
                trtspec::kMaxNodes, "], got ", N);
    *nodesOut = N;
    return static_cast<int32_t>(B);
}

const int32_t* numNodesPtr(const char* op, const OptTensor& numNodes, const Tensor& parents) {
    if (!numNodes.has_value()) return nullptr;
    checkTensor(op, "num_nodes", *numNodes, 1, at::kInt, parents);
    checkSize(op, "num_nodes", *numNodes, 0, parents.size(0));
    return numNodes->data_ptr<int32_t>();
}

int32_t maxDepthOf(const char* op, std::optional<int64_t> maxDepth, int64_t N) {
    const int64_t d = maxDepth.value_or(N - 1);
    TORCH_CHECK(d >= 0 && d < trtspec::kMaxNodes, "trtspec::", op, ": max_depth must be in [0, ",
                trtspec::kMaxNodes - 1, "], got ", d);
    return static_cast<int32_t>(d);
}

#ifdef TRTSPEC_WITH_CUDA
// the caller's current stream on the device selected by the guard (never the legacy default stream
// unless the caller made it current)
cudaStream_t currentStream() { return c10::cuda::getCurrentCUDAStream().stream(); }
Tensor workspace(size_t bytes, const Tensor& like) {
    return at::empty({static_cast<int64_t>(std::max<size_t>(bytes, 1))}, like.options().dtype(at::kByte));
}
#define TRTSPEC_CUDA_GUARD(t) const c10::cuda::CUDAGuard deviceGuard((t).device())
#else
#define TRTSPEC_NO_CUDA(op) TORCH_CHECK(false, "trtspec::", op, ": this build of trtspec._C has no CUDA kernels")
#endif

// ---- tree_metadata -------------------------------------------------------------------------
std::tuple<Tensor, Tensor, Tensor, Tensor> treeMetadata(const Tensor& parents, const OptTensor& numNodes) {
    const char* op = "tree_metadata";
    checkDevice(op, parents);
    checkTensor(op, "parents", parents, 2, at::kInt, parents);  // [B, N]
    int64_t N = 0;
    const int32_t B = checkBatchNodes(op, parents, &N);
    const int32_t* nn = numNodesPtr(op, numNodes, parents);  // [B]
    const auto opts = parents.options().dtype(at::kInt);
    Tensor mask = at::empty({B, N, trtspec::maskWords(static_cast<int32_t>(N))}, opts);  // [B, N, ceil(N/32)]
    Tensor depth = at::empty({B, N}, opts), firstChild = at::empty({B, N}, opts), nextSibling = at::empty({B, N}, opts);
    trtspec::Status s;
    if (parents.is_cuda()) {
#ifdef TRTSPEC_WITH_CUDA
        TRTSPEC_CUDA_GUARD(parents);
        s = trtspec::cuda::treeMetadata(parents.data_ptr<int32_t>(), nn, B, static_cast<int32_t>(N),
                                        mask.data_ptr<int32_t>(), depth.data_ptr<int32_t>(),
                                        firstChild.data_ptr<int32_t>(), nextSibling.data_ptr<int32_t>(),
                                        currentStream());
#else
        TRTSPEC_NO_CUDA(op);
#endif
    } else {
        s = trtspec::cpu::treeMetadata(parents.data_ptr<int32_t>(), nn, B, static_cast<int32_t>(N),
                                       mask.data_ptr<int32_t>(), depth.data_ptr<int32_t>(),
                                       firstChild.data_ptr<int32_t>(), nextSibling.data_ptr<int32_t>());
    }
    checkStatus(op, s);
    return {mask, depth, firstChild, nextSibling};
}

// ---- verify_greedy -------------------------------------------------------------------------
std::tuple<Tensor, Tensor, Tensor> verifyGreedy(const Tensor& tokens, const Tensor& parents, const Tensor& logits,
                                                const OptTensor& numNodes, std::optional<int64_t> maxDepth) {
    const char* op = "verify_greedy";
    checkDevice(op, parents);
    checkTensor(op, "parents", parents, 2, at::kInt, parents);  // [B, N]
    int64_t N = 0;
    const int32_t B = checkBatchNodes(op, parents, &N);
    checkTensor(op, "tokens", tokens, 2, at::kLong, parents);  // [B, N]
    checkSize(op, "tokens", tokens, 0, B);
    checkSize(op, "tokens", tokens, 1, N);
    TORCH_CHECK(logits.dim() == 3, "trtspec::", op, ": target_logits must have 3 dimensions, got shape ",
                logits.sizes());
    trtspec::DType dtype;
    switch (logits.scalar_type()) {
        case at::kFloat: dtype = trtspec::DType::kFloat32; break;
        case at::kHalf: dtype = trtspec::DType::kFloat16; break;
        case at::kBFloat16: dtype = trtspec::DType::kBFloat16; break;
        default:
            TORCH_CHECK(false, "trtspec::", op, ": target_logits must be float32, float16 or bfloat16, got ",
                        logits.scalar_type());
    }
    checkTensor(op, "target_logits", logits, 3, logits.scalar_type(), parents);  // [B, N, V]
    checkSize(op, "target_logits", logits, 0, B);
    checkSize(op, "target_logits", logits, 1, N);
    const int64_t V = logits.size(2);
    TORCH_CHECK(V >= 1, "trtspec::", op, ": target_logits.shape[2] (V) must be >= 1");
    const int32_t* nn = numNodesPtr(op, numNodes, parents);
    const int32_t D = maxDepthOf(op, maxDepth, N);
    const auto opts = parents.options();
    Tensor acceptedLen = at::empty({B}, opts.dtype(at::kInt));            // [B]
    Tensor acceptedNodes = at::empty({B, D + 1}, opts.dtype(at::kInt));   // [B, max_depth + 1]
    Tensor bonus = at::empty({B}, opts.dtype(at::kLong));                 // [B]
    trtspec::Status s;
    if (parents.is_cuda()) {
#ifdef TRTSPEC_WITH_CUDA
        TRTSPEC_CUDA_GUARD(parents);
        s = trtspec::cuda::verifyGreedy(tokens.data_ptr<int64_t>(), parents.data_ptr<int32_t>(), logits.data_ptr(),
                                        dtype, nn, B, static_cast<int32_t>(N), V, D, acceptedLen.data_ptr<int32_t>(),
                                        acceptedNodes.data_ptr<int32_t>(), bonus.data_ptr<int64_t>(), currentStream());
#else
        TRTSPEC_NO_CUDA(op);
#endif
    } else {
        s = trtspec::cpu::verifyGreedy(tokens.data_ptr<int64_t>(), parents.data_ptr<int32_t>(), logits.data_ptr(),
                                       dtype, nn, B, static_cast<int32_t>(N), V, D, acceptedLen.data_ptr<int32_t>(),
                                       acceptedNodes.data_ptr<int32_t>(), bonus.data_ptr<int64_t>());
    }
    checkStatus(op, s);
    return {acceptedLen, acceptedNodes, bonus};
}

// ---- the sampled verifiers: one layout (draft tokens [B, D], target [B, D+1, V], draft [B, D, V]) --
// Checks what verify_sample and verify_block share and returns D; B comes from draft_tokens.
int64_t checkSampledInputs(const char* op, const Tensor& draftTokens, const Tensor& targetProbs,
                           const Tensor& draftProbs, const Tensor& seed, const Tensor& offset,
                           const OptTensor& draftLens, int64_t maxDraft) {
    checkDevice(op, draftTokens);
    TORCH_CHECK(draftTokens.scalar_type() == at::kInt || draftTokens.scalar_type() == at::kLong, "trtspec::", op,
                ": draft_tokens must be Int or Long, got ", draftTokens.scalar_type());
    checkTensor(op, "draft_tokens", draftTokens, 2, draftTokens.scalar_type(), draftTokens);  // [B, D]
    const int64_t B = draftTokens.size(0), D = draftTokens.size(1);
    TORCH_CHECK(B <= trtspec::kMaxBatch, "trtspec::", op, ": batch must be <= ", trtspec::kMaxBatch, ", got ", B);
    TORCH_CHECK(D <= maxDraft, "trtspec::", op, ": draft_tokens.shape[1] (D) must be <= ", maxDraft, ", got ", D);
    checkTensor(op, "target_probs", targetProbs, 3, at::kFloat, draftTokens);  // [B, D+1, V]
    checkSize(op, "target_probs", targetProbs, 0, B);
    checkSize(op, "target_probs", targetProbs, 1, D + 1);
    const int64_t V = targetProbs.size(2);
    TORCH_CHECK(V >= 1, "trtspec::", op, ": target_probs.shape[2] (V) must be >= 1");
    checkTensor(op, "draft_probs", draftProbs, 3, at::kFloat, draftTokens);  // [B, D, V]
    checkSize(op, "draft_probs", draftProbs, 0, B);
    checkSize(op, "draft_probs", draftProbs, 1, D);
    checkSize(op, "draft_probs", draftProbs, 2, V);
    checkTensor(op, "seed", seed, 1, at::kLong, draftTokens);  // [B]
    checkSize(op, "seed", seed, 0, B);
    checkTensor(op, "offset", offset, 1, at::kLong, draftTokens);  // [B]
    checkSize(op, "offset", offset, 0, B);
    if (draftLens.has_value()) {
        checkTensor(op, "draft_lens", *draftLens, 1, at::kInt, draftTokens);  // [B]
        checkSize(op, "draft_lens", *draftLens, 0, B);
    }
    return D;
}

const int32_t* optionalData(const OptTensor& t) { return t.has_value() ? t->data_ptr<int32_t>() : nullptr; }

// The launcher's overload for the draft tokens' dtype (int32 or int64).
template <typename Fn>
trtspec::Status withTokens(const Tensor& draftTokens, Fn fn) {
    if (draftTokens.scalar_type() == at::kInt) return fn(draftTokens.data_ptr<int32_t>());
    return fn(draftTokens.data_ptr<int64_t>());
}

// ---- verify_sample -------------------------------------------------------------------------
std::tuple<Tensor, Tensor, Tensor> verifySample(const Tensor& draftTokens, const Tensor& parents,
                                                const Tensor& targetProbs, const Tensor& draftProbs,
                                                const Tensor& seed, const Tensor& offset, bool withoutReplacement,
                                                const OptTensor& draftLens, std::optional<int64_t> maxDepth) {
    const char* op = "verify_sample";
    const int64_t D = checkSampledInputs(op, draftTokens, targetProbs, draftProbs, seed, offset, draftLens,
                                         trtspec::kMaxNodes - 1);
    const int32_t B = static_cast<int32_t>(draftTokens.size(0));
    const int64_t V = targetProbs.size(2);
    checkTensor(op, "parents", parents, 2, at::kInt, draftTokens);  // [B, D+1]
    checkSize(op, "parents", parents, 0, B);
    checkSize(op, "parents", parents, 1, D + 1);
    const int32_t L = maxDepthOf(op, maxDepth, D + 1) + 1;
    const auto opts = draftTokens.options();
    Tensor acceptedLen = at::empty({B}, opts.dtype(at::kInt));       // [B]
    Tensor acceptedNodes = at::empty({B, L}, opts.dtype(at::kInt));  // [B, max_depth + 1]
    Tensor bonus = at::empty({B}, opts.dtype(at::kLong));            // [B]
    const int32_t* lens = optionalData(draftLens);
    trtspec::Status s;
    if (draftTokens.is_cuda()) {
#ifdef TRTSPEC_WITH_CUDA
        TRTSPEC_CUDA_GUARD(draftTokens);
        const size_t bytes = trtspec::cuda::verifySampleWorkspaceSize(B, V);
        Tensor ws = workspace(bytes, draftTokens);
        s = withTokens(draftTokens, [&](auto tokens) {
            return trtspec::cuda::verifySample(tokens, parents.data_ptr<int32_t>(), targetProbs.data_ptr<float>(),
                                               draftProbs.data_ptr<float>(), lens, seed.data_ptr<int64_t>(),
                                               offset.data_ptr<int64_t>(), B, static_cast<int32_t>(D), V, L - 1,
                                               withoutReplacement, acceptedLen.data_ptr<int32_t>(),
                                               acceptedNodes.data_ptr<int32_t>(), bonus.data_ptr<int64_t>(),
                                               ws.data_ptr(), bytes, currentStream());
        });
#else
        TRTSPEC_NO_CUDA(op);
#endif
    } else {
        s = withTokens(draftTokens, [&](auto tokens) {
            return trtspec::cpu::verifySample(tokens, parents.data_ptr<int32_t>(), targetProbs.data_ptr<float>(),
                                              draftProbs.data_ptr<float>(), lens, seed.data_ptr<int64_t>(),
                                              offset.data_ptr<int64_t>(), B, static_cast<int32_t>(D), V, L - 1,
                                              withoutReplacement, acceptedLen.data_ptr<int32_t>(),
                                              acceptedNodes.data_ptr<int32_t>(), bonus.data_ptr<int64_t>());
        });
    }
    checkStatus(op, s);
    return {acceptedLen, acceptedNodes, bonus};
}

// ---- verify_block --------------------------------------------------------------------------
std::tuple<Tensor, Tensor> verifyBlock(const Tensor& draftTokens, const Tensor& targetProbs, const Tensor& draftProbs,
                                       const Tensor& seed, const Tensor& offset, const OptTensor& draftLens) {
    const char* op = "verify_block";
    const int64_t D = checkSampledInputs(op, draftTokens, targetProbs, draftProbs, seed, offset, draftLens,
                                         trtspec::kMaxBlockDraft);
    const int32_t B = static_cast<int32_t>(draftTokens.size(0));
    const int64_t V = targetProbs.size(2);
    const auto opts = draftTokens.options();
    Tensor acceptedLen = at::empty({B}, opts.dtype(at::kInt));  // [B]
    Tensor bonus = at::empty({B}, opts.dtype(at::kLong));       // [B]
    const int32_t* lens = optionalData(draftLens);
    trtspec::Status s;
    if (draftTokens.is_cuda()) {
#ifdef TRTSPEC_WITH_CUDA
        TRTSPEC_CUDA_GUARD(draftTokens);
        const size_t bytes = trtspec::cuda::verifyBlockWorkspaceSize(B, static_cast<int32_t>(D), V);
        Tensor ws = workspace(bytes, draftTokens);
        s = withTokens(draftTokens, [&](auto tokens) {
            return trtspec::cuda::verifyBlock(tokens, targetProbs.data_ptr<float>(), draftProbs.data_ptr<float>(),
                                              lens, seed.data_ptr<int64_t>(), offset.data_ptr<int64_t>(), B,
                                              static_cast<int32_t>(D), V, acceptedLen.data_ptr<int32_t>(),
                                              bonus.data_ptr<int64_t>(), ws.data_ptr(), bytes, currentStream());
        });
#else
        TRTSPEC_NO_CUDA(op);
#endif
    } else {
        s = withTokens(draftTokens, [&](auto tokens) {
            return trtspec::cpu::verifyBlock(tokens, targetProbs.data_ptr<float>(), draftProbs.data_ptr<float>(), lens,
                                             seed.data_ptr<int64_t>(), offset.data_ptr<int64_t>(), B,
                                             static_cast<int32_t>(D), V, acceptedLen.data_ptr<int32_t>(),
                                             bonus.data_ptr<int64_t>());
        });
    }
    checkStatus(op, s);
    return {acceptedLen, bonus};
}

// ---- accepted_kv_indices -------------------------------------------------------------------
std::tuple<Tensor, Tensor, Tensor> acceptedKvIndices(const Tensor& acceptedNodes, const Tensor& acceptedLen,
                                                     const Tensor& cacheLens) {
    const char* op = "accepted_kv_indices";
    checkDevice(op, acceptedNodes);
    checkTensor(op, "accepted_nodes", acceptedNodes, 2, at::kInt, acceptedNodes);  // [B, L]
    const int64_t B = acceptedNodes.size(0), L = acceptedNodes.size(1);
    TORCH_CHECK(B <= trtspec::kMaxBatch, "trtspec::", op, ": batch must be <= ", trtspec::kMaxBatch, ", got ", B);
    TORCH_CHECK(L >= 1 && L <= trtspec::kMaxNodes, "trtspec::", op, ": accepted_nodes.shape[1] must be in [1, ",
                trtspec::kMaxNodes, "], got ", L);
    checkTensor(op, "accepted_len", acceptedLen, 1, at::kInt, acceptedNodes);  // [B]
    checkSize(op, "accepted_len", acceptedLen, 0, B);
    checkTensor(op, "cache_lens", cacheLens, 1, at::kInt, acceptedNodes);  // [B]
    checkSize(op, "cache_lens", cacheLens, 0, B);
    const auto opts = acceptedNodes.options();
    Tensor src = at::empty({B, L}, opts), dst = at::empty({B, L}, opts), newLens = at::empty({B}, opts);
    trtspec::Status s;
    if (acceptedNodes.is_cuda()) {
#ifdef TRTSPEC_WITH_CUDA
        TRTSPEC_CUDA_GUARD(acceptedNodes);
        s = trtspec::cuda::acceptedKvIndices(acceptedNodes.data_ptr<int32_t>(), acceptedLen.data_ptr<int32_t>(),
                                             cacheLens.data_ptr<int32_t>(), static_cast<int32_t>(B),
                                             static_cast<int32_t>(L), src.data_ptr<int32_t>(), dst.data_ptr<int32_t>(),
                                             newLens.data_ptr<int32_t>(), currentStream());
#else
        TRTSPEC_NO_CUDA(op);
#endif
    } else {
        s = trtspec::cpu::acceptedKvIndices(acceptedNodes.data_ptr<int32_t>(), acceptedLen.data_ptr<int32_t>(),
                                            cacheLens.data_ptr<int32_t>(), static_cast<int32_t>(B),
                                            static_cast<int32_t>(L), src.data_ptr<int32_t>(), dst.data_ptr<int32_t>(),
                                            newLens.data_ptr<int32_t>());
    }
    checkStatus(op, s);
    return {src, dst, newLens};
}

}  // namespace

TORCH_LIBRARY_IMPL(trtspec, CPU, m) {
    m.impl("tree_metadata", &treeMetadata);
    m.impl("verify_greedy", &verifyGreedy);
    m.impl("verify_sample", &verifySample);
    m.impl("verify_block", &verifyBlock);
    m.impl("accepted_kv_indices", &acceptedKvIndices);
}

#ifdef TRTSPEC_WITH_CUDA
TORCH_LIBRARY_IMPL(trtspec, CUDA, m) {
    m.impl("tree_metadata", &treeMetadata);
    m.impl("verify_greedy", &verifyGreedy);
    m.impl("verify_sample", &verifySample);
    m.impl("verify_block", &verifyBlock);
    m.impl("accepted_kv_indices", &acceptedKvIndices);
}
#endif
