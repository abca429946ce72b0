#include "trtSpecVerifyGreedy/trtSpecVerifyGreedyPlugin.h"

#include "common/trtspecShapeCheck.h"

namespace trtspec {
namespace plugin {

using F = TrtSpecVerifyGreedyFields;

bool TrtSpecVerifyGreedyPlugin::checkDims(nvinfer1::Dims const* in, int32_t nbInputs, std::string& why) const {
    nvinfer1::Dims const& tokens = in[F::kInTokens];
    nvinfer1::Dims const& parents = in[F::kInParents];
    nvinfer1::Dims const& logits = in[F::kInTargetLogits];
    char const* const tokensName = F::kInputs[F::kInTokens].name;
    char const* const parentsName = F::kInputs[F::kInParents].name;
    char const* const logitsName = F::kInputs[F::kInTargetLogits].name;
    if (!checkRank(tokens, 2, tokensName, why) || !checkRank(parents, 2, parentsName, why) ||
        !checkRank(logits, 3, logitsName, why))
        return false;
    int64_t const B = tokens.d[0], N = tokens.d[1];
    if (!checkDim(parents.d[0], B, parentsName, 0, why) || !checkDim(parents.d[1], N, parentsName, 1, why) ||
        !checkDim(logits.d[0], B, logitsName, 0, why) || !checkDim(logits.d[1], N, logitsName, 1, why))
        return false;
    if (!checkRange(B, 0, kMaxBatch, "batch", why) || !checkRange(N, 1, kMaxNodes, "nodes per tree", why) ||
        !checkRange(logits.d[2], 1, INT32_MAX, "vocabulary size", why))
        return false;
    return checkNumNodes<F>(in, nbInputs, B, why);
}

int32_t TrtSpecVerifyGreedyPlugin::getOutputShapes(nvinfer1::DimsExprs const* inputs, int32_t nbInputs,
                                                   nvinfer1::DimsExprs const*, int32_t, nvinfer1::DimsExprs* outputs,
                                                   int32_t nbOutputs, nvinfer1::IExprBuilder& exprBuilder) noexcept {
    if (!ioCountOk(nbInputs, nbOutputs)) return -1;
    return treeVerdictShapes<F>(inputs, outputs, mAttributes[F::kAttrMaxDepth], exprBuilder);
}

size_t TrtSpecVerifyGreedyPlugin::getWorkspaceSize(nvinfer1::DynamicPluginTensorDesc const*, int32_t,
                                                   nvinfer1::DynamicPluginTensorDesc const*, int32_t) const noexcept {
    return 0;
}

int32_t TrtSpecVerifyGreedyPlugin::enqueue(nvinfer1::PluginTensorDesc const* inputDesc,
                                           nvinfer1::PluginTensorDesc const*, void const* const* inputs,
                                           void* const* outputs, void*, cudaStream_t stream) noexcept {
    nvinfer1::Dims const& logits = inputDesc[F::kInTargetLogits].dims;
    int64_t const B = logits.d[0], N = logits.d[1], V = logits.d[2];
    DType dtype;
    if (!toKernelDType(inputDesc[F::kInTargetLogits].type, dtype) || B < 0 || B > kMaxBatch || N < 1 ||
        N > kMaxNodes || V < 1 || V > INT32_MAX)
        return reportStatus(F::kName, Status::kInvalidArgument);
    int32_t const maxDepth = mAttributes[F::kAttrMaxDepth] >= 0 ? mAttributes[F::kAttrMaxDepth] : static_cast<int32_t>(N - 1);
    return reportStatus(
        F::kName,
        cuda::verifyGreedy(static_cast<int64_t const*>(inputs[F::kInTokens]),
                           static_cast<int32_t const*>(inputs[F::kInParents]), inputs[F::kInTargetLogits], dtype,
                           hasInput(F::kInNumNodes) ? static_cast<int32_t const*>(inputs[F::kInNumNodes]) : nullptr,
                           static_cast<int32_t>(B), static_cast<int32_t>(N), V, maxDepth,
                           static_cast<int32_t*>(outputs[F::kOutAcceptedLen]),
                           static_cast<int32_t*>(outputs[F::kOutAcceptedNodes]),
                           static_cast<int64_t*>(outputs[F::kOutBonusToken]), stream));
}

}  // namespace plugin
}  // namespace trtspec
