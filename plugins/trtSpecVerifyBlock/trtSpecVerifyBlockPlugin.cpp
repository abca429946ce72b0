#include "trtSpecVerifyBlock/trtSpecVerifyBlockPlugin.h"

#include "common/trtspecShapeCheck.h"
#include "trtspec/kernels.h"

namespace trtspec {
namespace plugin {

using F = TrtSpecVerifyBlockFields;

bool TrtSpecVerifyBlockPlugin::checkDims(nvinfer1::Dims const* in, int32_t, std::string& why) const {
    nvinfer1::Dims const& drafts = in[F::kInDraftTokens];
    nvinfer1::Dims const& target = in[F::kInTargetProbs];
    nvinfer1::Dims const& draft = in[F::kInDraftProbs];
    char const* const targetName = F::kInputs[F::kInTargetProbs].name;
    char const* const draftName = F::kInputs[F::kInDraftProbs].name;
    if (!checkRank(drafts, 2, F::kInputs[F::kInDraftTokens].name, why) || !checkRank(target, 3, targetName, why) ||
        !checkRank(draft, 3, draftName, why) ||
        !checkRank(in[F::kInSeedOffset], 1, F::kInputs[F::kInSeedOffset].name, why) ||
        !checkDim(in[F::kInSeedOffset].d[0], 2, F::kInputs[F::kInSeedOffset].name, 0, why))
        return false;
    int64_t const B = drafts.d[0], D = drafts.d[1], V = target.d[2];
    if (!checkDim(target.d[0], B, targetName, 0, why) ||
        !checkDim(target.d[1], D < 0 ? -1 : D + 1, targetName, 1, why) || !checkDim(draft.d[0], B, draftName, 0, why) ||
        !checkDim(draft.d[1], D, draftName, 1, why) || !checkDim(draft.d[2], V, draftName, 2, why))
        return false;
    return checkRange(B, 0, kMaxBatch, "batch", why) && checkRange(D, 0, kMaxBlockDraft, "draft length", why) &&
           checkRange(V, 1, INT32_MAX, "vocabulary size", why);
}

int32_t TrtSpecVerifyBlockPlugin::getOutputShapes(nvinfer1::DimsExprs const* inputs, int32_t nbInputs,
                                                  nvinfer1::DimsExprs const*, int32_t, nvinfer1::DimsExprs* outputs,
                                                  int32_t nbOutputs, nvinfer1::IExprBuilder&) noexcept {
    if (!ioCountOk(nbInputs, nbOutputs) || inputs[F::kInDraftTokens].nbDims != 2) return -1;
    nvinfer1::IDimensionExpr const* B = inputs[F::kInDraftTokens].d[0];
    outputs[F::kOutAcceptedLen].nbDims = 1;
    outputs[F::kOutAcceptedLen].d[0] = B;
    outputs[F::kOutBonusToken].nbDims = 1;
    outputs[F::kOutBonusToken].d[0] = B;
    return 0;
}

size_t TrtSpecVerifyBlockPlugin::getWorkspaceSize(nvinfer1::DynamicPluginTensorDesc const* inputs, int32_t,
                                                  nvinfer1::DynamicPluginTensorDesc const*, int32_t) const noexcept {
    int64_t const B = dim(inputs[F::kInDraftTokens].max, 0, 0), D = dim(inputs[F::kInDraftTokens].max, 1, 0);
    int64_t const V = dim(inputs[F::kInTargetProbs].max, 2, 0);
    if (B <= 0 || V <= 0 || B > kMaxBatch || D > kMaxBlockDraft || V > INT32_MAX) return 0;
    size_t const bytes = cuda::verifyBlockWorkspaceSize(static_cast<int32_t>(B), static_cast<int32_t>(D), V);
    return bytes == 0 ? 0 : bytes + 256;
}

int32_t TrtSpecVerifyBlockPlugin::enqueue(nvinfer1::PluginTensorDesc const* inputDesc,
                                          nvinfer1::PluginTensorDesc const*, void const* const* inputs,
                                          void* const* outputs, void* workspace, cudaStream_t stream) noexcept {
    int64_t const B = inputDesc[F::kInDraftTokens].dims.d[0], D = inputDesc[F::kInDraftTokens].dims.d[1];
    int64_t const V = inputDesc[F::kInTargetProbs].dims.d[2];
    if (B < 0 || B > kMaxBatch || D < 0 || D > kMaxBlockDraft || V < 1 || V > INT32_MAX)
        return reportStatus(F::kName, Status::kInvalidArgument);
    size_t const bytes = cuda::verifyBlockWorkspaceSize(static_cast<int32_t>(B), static_cast<int32_t>(D), V);
    return reportStatus(
        F::kName,
        cuda::verifyBlockSeedOnDevice(
            static_cast<int64_t const*>(inputs[F::kInDraftTokens]), static_cast<float const*>(inputs[F::kInTargetProbs]),
            static_cast<float const*>(inputs[F::kInDraftProbs]), static_cast<int32_t>(B), static_cast<int32_t>(D), V,
            static_cast<int64_t const*>(inputs[F::kInSeedOffset]), static_cast<int32_t*>(outputs[F::kOutAcceptedLen]),
            static_cast<int64_t*>(outputs[F::kOutBonusToken]), bytes ? alignPointer(workspace) : nullptr, bytes,
            stream));
}

}  // namespace plugin
}  // namespace trtspec
