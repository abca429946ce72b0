// TrtSpecVerifyGreedy (version 1, namespace trtspec): greedy tree verification with the argmax fused into the walk.
// Interface: trtSpecVerifyGreedy.yaml (README.md); kernel: trtspec::cuda::verifyGreedy.
#pragma once
#include "common/trtspecPluginBase.h"
#include "trtSpecVerifyGreedy/trtSpecVerifyGreedyFields.h"

namespace trtspec {
namespace plugin {

class TrtSpecVerifyGreedyPlugin final : public PluginBase<TrtSpecVerifyGreedyPlugin, TrtSpecVerifyGreedyFields> {
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

class TrtSpecVerifyGreedyCreator final : public CreatorBase<TrtSpecVerifyGreedyPlugin, TrtSpecVerifyGreedyFields> {};

}  // namespace plugin
}  // namespace trtspec
