// TrtSpecVerifySample (version 2, namespace trtspec): lossless tree verification by recursive rejection sampling.
// Interface: trtSpecVerifySample.yaml (README.md); kernel: trtspec::cuda::verifySample (int32 or int64 drafts).
#pragma once
#include "common/trtspecPluginBase.h"
#include "trtSpecVerifySample/trtSpecVerifySampleFields.h"

namespace trtspec {
namespace plugin {

class TrtSpecVerifySamplePlugin final : public PluginBase<TrtSpecVerifySamplePlugin, TrtSpecVerifySampleFields> {
public:
    using PluginBase::PluginBase;

    bool checkDims(nvinfer1::Dims const* in, int32_t nbInputs, std::string& why) const;
    int32_t getOutputShapes(nvinfer1::DimsExprs const* inputs, int32_t nbInputs, nvinfer1::DimsExprs const* shapeInputs,
                            int32_t nbShapeInputs, nvinfer1::DimsExprs* outputs, int32_t nbOutputs,
                            nvinfer1::IExprBuilder& exprBuilder) noexcept override;
    size_t getWorkspaceSize(nvinfer1::DynamicPluginTensorDesc const* inputs, int32_t nbInputs,
                            nvinfer1::DynamicPluginTensorDesc const* outputs, int32_t nbOutputs) const noexcept override;
    int32_t enqueue(nvinfer1::PluginTensorDesc const* inputDesc, nvinfer1::PluginTensorDesc const* outputDesc,
                    void const* const* inputs, void* const* outputs, void* workspace,
                    cudaStream_t stream) noexcept override;
};

class TrtSpecVerifySampleCreator final : public CreatorBase<TrtSpecVerifySamplePlugin, TrtSpecVerifySampleFields> {};

}  // namespace plugin
}  // namespace trtspec
