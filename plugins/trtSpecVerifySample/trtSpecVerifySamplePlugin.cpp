#include "trtSpecVerifySample/trtSpecVerifySamplePlugin.h"

#include "common/trtspecShapeCheck.h"
#include "trtspec/kernels.h"

namespace trtspec {
namespace plugin {

using F = TrtSpecVerifySampleFields;

bool TrtSpecVerifySamplePlugin::checkDims(nvinfer1::Dims const* in, int32_t nbInputs, std::string& why) const {
    nvinfer1::Dims const& tokens = in[F::kInTokens];
    int32_t const threeD[] = {F::kInTargetProbs, F::kInDraftProbs};
    if (!checkRank(tokens, 2, F::kInputs[F::kInTokens].name, why) ||
        !checkRank(in[F::kInParents], 2, F::kInputs[F::kInParents].name, why) ||
        !checkRank(in[F::kInSeedOffset], 1, F::kInputs[F::kInSeedOffset].name, why) ||
        !checkDim(in[F::kInSeedOffset].d[0], 2, F::kInputs[F::kInSeedOffset].name, 0, why))
        return false;
    int64_t const B = tokens.d[0], N = tokens.d[1];
    if (!checkDim(in[F::kInParents].d[0], B, F::kInputs[F::kInParents].name, 0, why) ||
        !checkDim(in[F::kInParents].d[1], N, F::kInputs[F::kInParents].name, 1, why))
        return false;
    int64_t const V = in[F::kInTargetProbs].nbDims == 3 ? in[F::kInTargetProbs].d[2] : -1;
    for (int32_t i : threeD) {
        char const* const name = F::kInputs[i].name;
        if (!checkRank(in[i], 3, name, why) || !checkDim(in[i].d[0], B, name, 0, why) ||
            !checkDim(in[i].d[1], N, name, 1, why) || !checkDim(in[i].d[2], V, name, 2, why))
            return false;
    }
    if (!checkRange(B, 0, kMaxBatch, "batch", why) || !checkRange(N, 1, kMaxNodes, "nodes per tree", why) ||
        !checkRange(V, 1, INT32_MAX, "vocabulary size", why))
        return false;
    return checkNumNodes<F>(in, nbInputs, B, why);
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
    if (B < 0 || B > kMaxBatch || N < 1 || N > kMaxNodes || V < 1 || V > INT32_MAX)
        return reportStatus(F::kName, Status::kInvalidArgument);
    int32_t const maxDepth = mAttributes[F::kAttrMaxDepth] >= 0 ? mAttributes[F::kAttrMaxDepth] : static_cast<int32_t>(N - 1);
    size_t const bytes = cuda::verifySampleWorkspaceSize(static_cast<int32_t>(B), V);
    return reportStatus(
        F::kName,
        cuda::verifySampleSeedOnDevice(
            static_cast<int64_t const*>(inputs[F::kInTokens]), static_cast<int32_t const*>(inputs[F::kInParents]),
            static_cast<float const*>(inputs[F::kInTargetProbs]), static_cast<float const*>(inputs[F::kInDraftProbs]),
            hasInput(F::kInNumNodes) ? static_cast<int32_t const*>(inputs[F::kInNumNodes]) : nullptr,
            static_cast<int32_t>(B), static_cast<int32_t>(N), V, maxDepth,
            static_cast<int64_t const*>(inputs[F::kInSeedOffset]), mAttributes[F::kAttrSiblingsWithoutReplacement] != 0,
            static_cast<int32_t*>(outputs[F::kOutAcceptedLen]), static_cast<int32_t*>(outputs[F::kOutAcceptedNodes]),
            static_cast<int64_t*>(outputs[F::kOutBonusToken]), alignPointer(workspace), bytes, stream));
}

}  // namespace plugin
}  // namespace trtspec
