#include "trtSpecVerifySample/trtSpecVerifySamplePlugin.h"

#include "common/trtspecShapeCheck.h"
#include "trtspec/kernels.h"

namespace trtspec {
namespace plugin {

using F = TrtSpecVerifySampleFields;

bool TrtSpecVerifySamplePlugin::checkDims(nvinfer1::Dims const* in, int32_t nbInputs, std::string& why) const {
    int64_t B = -1, D = -1, V = -1;
    if (!checkSampledDims<F>(in, nbInputs, kMaxNodes - 1, B, D, V, why)) return false;
    nvinfer1::Dims const& parents = in[F::kInParents];
    char const* const name = F::kInputs[F::kInParents].name;
    return checkRank(parents, 2, name, why) && checkDim(parents.d[0], B, name, 0, why) &&
           checkDim(parents.d[1], D < 0 ? -1 : D + 1, name, 1, why);
}

int32_t TrtSpecVerifySamplePlugin::getOutputShapes(nvinfer1::DimsExprs const* inputs, int32_t nbInputs,
                                                   nvinfer1::DimsExprs const*, int32_t, nvinfer1::DimsExprs* outputs,
                                                   int32_t nbOutputs, nvinfer1::IExprBuilder& exprBuilder) noexcept {
    if (!ioCountOk(nbInputs, nbOutputs)) return -1;
    return treeVerdictShapes<F>(inputs, outputs, mAttributes[F::kAttrMaxDepth], exprBuilder);
}

size_t TrtSpecVerifySamplePlugin::getWorkspaceSize(nvinfer1::DynamicPluginTensorDesc const* inputs, int32_t,
                                                   nvinfer1::DynamicPluginTensorDesc const*, int32_t) const noexcept {
    // two float rows of V per request (residual p and renormalised q), 256-byte aligned
    int64_t const B = dim(inputs[F::kInTargetProbs].max, 0, 0), V = dim(inputs[F::kInTargetProbs].max, 2, 0);
    if (B <= 0 || V <= 0 || B > kMaxBatch || V > INT32_MAX) return 0;
    return cuda::verifySampleWorkspaceSize(static_cast<int32_t>(B), V) + 256;
}

int32_t TrtSpecVerifySamplePlugin::enqueue(nvinfer1::PluginTensorDesc const* inputDesc,
                                           nvinfer1::PluginTensorDesc const*, void const* const* inputs,
                                           void* const* outputs, void* workspace, cudaStream_t stream) noexcept {
    nvinfer1::Dims const& target = inputDesc[F::kInTargetProbs].dims;
    int64_t const B = target.d[0], N = target.d[1], V = target.d[2];
    nvinfer1::DataType const tokenType = inputDesc[F::kInDraftTokens].type;
    if (B < 0 || B > kMaxBatch || N < 1 || N > kMaxNodes || V < 1 || V > INT32_MAX ||
        (tokenType != nvinfer1::DataType::kINT32 && tokenType != nvinfer1::DataType::kINT64))
        return reportStatus(F::kName, Status::kInvalidArgument);
    int32_t const maxDepth = mAttributes[F::kAttrMaxDepth] >= 0 ? mAttributes[F::kAttrMaxDepth] : static_cast<int32_t>(N - 1);
    size_t const bytes = cuda::verifySampleWorkspaceSize(static_cast<int32_t>(B), V);
    auto launch = [&](auto const* draftTokens) {
        return cuda::verifySample(
            draftTokens, static_cast<int32_t const*>(inputs[F::kInParents]),
            static_cast<float const*>(inputs[F::kInTargetProbs]), static_cast<float const*>(inputs[F::kInDraftProbs]),
            hasInput(F::kInDraftLens) ? static_cast<int32_t const*>(inputs[F::kInDraftLens]) : nullptr,
            static_cast<int64_t const*>(inputs[F::kInSeed]), static_cast<int64_t const*>(inputs[F::kInOffset]),
            static_cast<int32_t>(B), static_cast<int32_t>(N - 1), V, maxDepth,
            mAttributes[F::kAttrSiblingsWithoutReplacement] != 0, static_cast<int32_t*>(outputs[F::kOutAcceptedLen]),
            static_cast<int32_t*>(outputs[F::kOutAcceptedNodes]), static_cast<int64_t*>(outputs[F::kOutBonusToken]),
            alignPointer(workspace), bytes, stream);
    };
    return reportStatus(F::kName, tokenType == nvinfer1::DataType::kINT32
                                      ? launch(static_cast<int32_t const*>(inputs[F::kInDraftTokens]))
                                      : launch(static_cast<int64_t const*>(inputs[F::kInDraftTokens])));
}

}  // namespace plugin
}  // namespace trtspec
