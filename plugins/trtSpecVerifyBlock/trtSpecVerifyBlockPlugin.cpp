#include "trtSpecVerifyBlock/trtSpecVerifyBlockPlugin.h"

#include "common/trtspecShapeCheck.h"
#include "trtspec/kernels.h"

namespace trtspec {
namespace plugin {

using F = TrtSpecVerifyBlockFields;

bool TrtSpecVerifyBlockPlugin::checkDims(nvinfer1::Dims const* in, int32_t nbInputs, std::string& why) const {
    int64_t B = -1, D = -1, V = -1;
    return checkSampledDims<F>(in, nbInputs, kMaxBlockDraft, B, D, V, why);
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
    nvinfer1::DataType const tokenType = inputDesc[F::kInDraftTokens].type;
    if (B < 0 || B > kMaxBatch || D < 0 || D > kMaxBlockDraft || V < 1 || V > INT32_MAX ||
        (tokenType != nvinfer1::DataType::kINT32 && tokenType != nvinfer1::DataType::kINT64))
        return reportStatus(F::kName, Status::kInvalidArgument);
    size_t const bytes = cuda::verifyBlockWorkspaceSize(static_cast<int32_t>(B), static_cast<int32_t>(D), V);
    auto launch = [&](auto const* draftTokens) {
        return cuda::verifyBlock(
            draftTokens, static_cast<float const*>(inputs[F::kInTargetProbs]),
            static_cast<float const*>(inputs[F::kInDraftProbs]),
            hasInput(F::kInDraftLens) ? static_cast<int32_t const*>(inputs[F::kInDraftLens]) : nullptr,
            static_cast<int64_t const*>(inputs[F::kInSeed]), static_cast<int64_t const*>(inputs[F::kInOffset]),
            static_cast<int32_t>(B), static_cast<int32_t>(D), V, static_cast<int32_t*>(outputs[F::kOutAcceptedLen]),
            static_cast<int64_t*>(outputs[F::kOutBonusToken]), bytes ? alignPointer(workspace) : nullptr, bytes, stream);
    };
    return reportStatus(F::kName, tokenType == nvinfer1::DataType::kINT32
                                      ? launch(static_cast<int32_t const*>(inputs[F::kInDraftTokens]))
                                      : launch(static_cast<int64_t const*>(inputs[F::kInDraftTokens])));
}

}  // namespace plugin
}  // namespace trtspec
