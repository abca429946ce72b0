#include "trtSpecTreeMask/trtSpecTreeMaskPlugin.h"

#include "common/trtspecShapeCheck.h"

namespace trtspec {
namespace plugin {

using F = TrtSpecTreeMaskFields;

bool TrtSpecTreeMaskPlugin::checkDims(nvinfer1::Dims const* in, int32_t nbInputs, std::string& why) const {
    nvinfer1::Dims const& parents = in[F::kInParents];
    if (!checkRank(parents, 2, F::kInputs[F::kInParents].name, why)) return false;
    int64_t const B = parents.d[0], N = parents.d[1];
    if (!checkRange(B, 0, kMaxBatch, "batch", why) || !checkRange(N, 1, kMaxNodes, "nodes per tree", why)) return false;
    return checkNumNodes<F>(in, nbInputs, B, why);
}

int32_t TrtSpecTreeMaskPlugin::getOutputShapes(nvinfer1::DimsExprs const* inputs, int32_t nbInputs,
                                               nvinfer1::DimsExprs const*, int32_t, nvinfer1::DimsExprs* outputs,
                                               int32_t nbOutputs, nvinfer1::IExprBuilder& exprBuilder) noexcept {
    if (!ioCountOk(nbInputs, nbOutputs) || inputs[F::kInParents].nbDims != 2) return -1;
    nvinfer1::IDimensionExpr const* B = inputs[F::kInParents].d[0];
    nvinfer1::IDimensionExpr const* N = inputs[F::kInParents].d[1];
    nvinfer1::DimsExprs& mask = outputs[F::kOutPackedMask];  // [B, N, ceil(N/32)]
    mask.nbDims = 3;
    mask.d[0] = B;
    mask.d[1] = N;
    mask.d[2] = exprBuilder.operation(nvinfer1::DimensionOperation::kCEIL_DIV, *N, *exprBuilder.constant(32));
    outputs[F::kOutDepth] = inputs[F::kInParents];  // [B, N]
    return 0;
}

size_t TrtSpecTreeMaskPlugin::getWorkspaceSize(nvinfer1::DynamicPluginTensorDesc const* inputs, int32_t,
                                               nvinfer1::DynamicPluginTensorDesc const*, int32_t) const noexcept {
    // first_child and next_sibling (int32 [B, N] each): computed by the kernel, not plugin outputs
    size_t const bn = static_cast<size_t>(dim(inputs[F::kInParents].max, 0, 0)) *
                      static_cast<size_t>(dim(inputs[F::kInParents].max, 1, 0));
    return 2 * alignUp(bn * sizeof(int32_t)) + 256;
}

int32_t TrtSpecTreeMaskPlugin::enqueue(nvinfer1::PluginTensorDesc const* inputDesc, nvinfer1::PluginTensorDesc const*,
                                       void const* const* inputs, void* const* outputs, void* workspace,
                                       cudaStream_t stream) noexcept {
    int64_t const B = inputDesc[F::kInParents].dims.d[0], N = inputDesc[F::kInParents].dims.d[1];
    if (B < 0 || B > kMaxBatch || N < 1 || N > kMaxNodes) return reportStatus(F::kName, Status::kInvalidArgument);
    auto* firstChild = static_cast<int32_t*>(alignPointer(workspace));
    auto* nextSibling = reinterpret_cast<int32_t*>(reinterpret_cast<char*>(firstChild) +
                                                   alignUp(static_cast<size_t>(B * N) * sizeof(int32_t)));
    return reportStatus(
        F::kName, cuda::treeMetadata(static_cast<int32_t const*>(inputs[F::kInParents]),
                                     hasInput(F::kInNumNodes) ? static_cast<int32_t const*>(inputs[F::kInNumNodes])
                                                              : nullptr,
                                     static_cast<int32_t>(B), static_cast<int32_t>(N),
                                     static_cast<int32_t*>(outputs[F::kOutPackedMask]),
                                     static_cast<int32_t*>(outputs[F::kOutDepth]), firstChild, nextSibling, stream));
}

}  // namespace plugin
}  // namespace trtspec
