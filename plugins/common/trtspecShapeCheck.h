// Small helpers for the plugins' shape checks: each returns false and sets `why` to a message
// naming the input and what was expected. Unknown (-1) dimensions pass (build time).
#pragma once
#include <NvInferRuntime.h>

#include <string>

#include "common/trtspecPluginBase.h"

namespace trtspec {
namespace plugin {

inline bool checkRank(nvinfer1::Dims const& d, int32_t rank, char const* name, std::string& why) {
    if (d.nbDims == rank) return true;
    why = std::string("input '") + name + "' must have " + std::to_string(rank) + " dimensions, got " +
          std::to_string(d.nbDims);
    return false;
}

inline bool checkDim(int64_t actual, int64_t expected, char const* name, int32_t axis, std::string& why) {
    if (sameOrUnknown(actual, expected)) return true;
    why = std::string("input '") + name + "' dimension " + std::to_string(axis) + " is " + std::to_string(actual) +
          ", expected " + std::to_string(expected);
    return false;
}

inline bool checkRange(int64_t value, int64_t lo, int64_t hi, char const* what, std::string& why) {
    if (value < 0 || (value >= lo && value <= hi)) return true;
    why = std::string(what) + " = " + std::to_string(value) + " outside [" + std::to_string(lo) + ", " +
          std::to_string(hi) + "]";
    return false;
}

// Optional input num_nodes [B] of a tree plugin with fields F (present when nbInputs > F::kInNumNodes).
template <typename F>
bool checkNumNodes(nvinfer1::Dims const* in, int32_t nbInputs, int64_t batch, std::string& why) {
    if (nbInputs <= F::kInNumNodes) return true;
    char const* const name = F::kInputs[F::kInNumNodes].name;
    return checkRank(in[F::kInNumNodes], 1, name, why) && checkDim(in[F::kInNumNodes].d[0], batch, name, 0, why);
}

// The sampled verifiers' shared inputs with fields F (one layout): draft_tokens [B, D],
// target_probs [B, D+1, V], draft_probs [B, D, V], seed [B], offset [B] and the optional
// draft_lens [B]; D <= maxDraft. Sets B, D, V (-1 where unknown at build time).
template <typename F>
bool checkSampledDims(nvinfer1::Dims const* in, int32_t nbInputs, int64_t maxDraft, int64_t& B, int64_t& D, int64_t& V,
                      std::string& why) {
    nvinfer1::Dims const& drafts = in[F::kInDraftTokens];
    nvinfer1::Dims const& target = in[F::kInTargetProbs];
    nvinfer1::Dims const& draft = in[F::kInDraftProbs];
    char const* const targetName = F::kInputs[F::kInTargetProbs].name;
    char const* const draftName = F::kInputs[F::kInDraftProbs].name;
    if (!checkRank(drafts, 2, F::kInputs[F::kInDraftTokens].name, why) || !checkRank(target, 3, targetName, why) ||
        !checkRank(draft, 3, draftName, why))
        return false;
    B = drafts.d[0];
    D = drafts.d[1];
    V = target.d[2];
    if (!checkDim(target.d[0], B, targetName, 0, why) || !checkDim(target.d[1], D < 0 ? -1 : D + 1, targetName, 1, why) ||
        !checkDim(draft.d[0], B, draftName, 0, why) || !checkDim(draft.d[1], D, draftName, 1, why) ||
        !checkDim(draft.d[2], V, draftName, 2, why))
        return false;
    int32_t const perRequest[] = {F::kInSeed, F::kInOffset, F::kInDraftLens};
    for (int32_t i : perRequest) {
        if (i >= nbInputs) continue;  // draft_lens is optional
        char const* const name = F::kInputs[i].name;
        if (!checkRank(in[i], 1, name, why) || !checkDim(in[i].d[0], B, name, 0, why)) return false;
    }
    return checkRange(B, 0, kMaxBatch, "batch", why) && checkRange(D, 0, maxDraft, "draft length", why) &&
           checkRange(V, 1, INT32_MAX, "vocabulary size", why);
}

// Output shapes of a tree verification with fields F: accepted_len [B], accepted_nodes [B, L] with
// L = max_depth + 1 (N when max_depth = -1), bonus_token [B]; B and N from parents [B, N].
template <typename F>
int32_t treeVerdictShapes(nvinfer1::DimsExprs const* inputs, nvinfer1::DimsExprs* outputs, int32_t maxDepth,
                          nvinfer1::IExprBuilder& exprBuilder) {
    if (inputs[F::kInParents].nbDims != 2) return -1;
    nvinfer1::IDimensionExpr const* B = inputs[F::kInParents].d[0];
    nvinfer1::IDimensionExpr const* N = inputs[F::kInParents].d[1];
    outputs[F::kOutAcceptedLen].nbDims = 1;
    outputs[F::kOutAcceptedLen].d[0] = B;
    outputs[F::kOutAcceptedNodes].nbDims = 2;
    outputs[F::kOutAcceptedNodes].d[0] = B;
    outputs[F::kOutAcceptedNodes].d[1] = maxDepth >= 0 ? exprBuilder.constant(maxDepth + 1) : N;
    outputs[F::kOutBonusToken].nbDims = 1;
    outputs[F::kOutBonusToken].d[0] = B;
    return 0;
}

}  // namespace plugin
}  // namespace trtspec
