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

// Output shapes of a tree verification with fields F: accepted_len [B], accepted_nodes [B, L] with
// L = max_depth + 1 (N when max_depth = -1), bonus_token [B]; B and N from tokens [B, N].
template <typename F>
int32_t treeVerdictShapes(nvinfer1::DimsExprs const* inputs, nvinfer1::DimsExprs* outputs, int32_t maxDepth,
                          nvinfer1::IExprBuilder& exprBuilder) {
    if (inputs[F::kInTokens].nbDims != 2) return -1;
    nvinfer1::IDimensionExpr const* B = inputs[F::kInTokens].d[0];
    nvinfer1::IDimensionExpr const* N = inputs[F::kInTokens].d[1];
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
