// TrtSpecTreeMask (version 1, namespace trtspec): packed ancestor mask and depth of draft trees.
// Interface: trtSpecTreeMask.yaml (README.md); kernel: trtspec::cuda::treeMetadata.
#pragma once
#include "common/trtspecPluginBase.h"
#include "trtSpecTreeMask/trtSpecTreeMaskFields.h"

namespace trtspec {
namespace plugin {

class TrtSpecTreeMaskPlugin final : public PluginBase<TrtSpecTreeMaskPlugin, TrtSpecTreeMaskFields> {
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

class TrtSpecTreeMaskCreator final : public CreatorBase<TrtSpecTreeMaskPlugin, TrtSpecTreeMaskFields> {};

}  // namespace plugin
}  // namespace trtspec
