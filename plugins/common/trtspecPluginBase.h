// What the four trtspec IPluginV3 plugins share: identity, capabilities, attributes and their
// serialization, dtype/format checks and the creator, all driven by the generated Fields header of
// each plugin (plugins/<folder>/<folder>Fields.h, from its YAML). A plugin class derives from
// PluginBase<Plugin, Fields> and implements only checkDims, getOutputShapes, getWorkspaceSize and
// enqueue; enqueue dispatches on dtype and calls a trtspec::cuda launcher on TensorRT's stream.
#pragma once
#include <NvInferRuntime.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "common/trtspecPluginSpec.h"
#include "trtspec/kernels.h"

namespace trtspec {
namespace plugin {

inline void logError(char const* plugin, std::string const& msg) noexcept {
    try {
        if (nvinfer1::ILogger* logger = ::getLogger())
            logger->log(nvinfer1::ILogger::Severity::kERROR, (std::string(plugin) + ": " + msg).c_str());
    } catch (...) {
    }
}

inline uint32_t ioBit(nvinfer1::DataType t) noexcept {
    switch (t) {
        case nvinfer1::DataType::kFLOAT: return kIoFloat32;
        case nvinfer1::DataType::kHALF: return kIoFloat16;
        case nvinfer1::DataType::kBF16: return kIoBFloat16;
        case nvinfer1::DataType::kINT32: return kIoInt32;
        case nvinfer1::DataType::kINT64: return kIoInt64;
        default: return 0;
    }
}

// The TensorRT dtype of an output (the generated headers give each output exactly one dtype).
inline nvinfer1::DataType outputType(uint32_t bits) noexcept {
    switch (bits) {
        case kIoFloat16: return nvinfer1::DataType::kHALF;
        case kIoBFloat16: return nvinfer1::DataType::kBF16;
        case kIoInt32: return nvinfer1::DataType::kINT32;
        case kIoInt64: return nvinfer1::DataType::kINT64;
        default: return nvinfer1::DataType::kFLOAT;
    }
}

inline bool toKernelDType(nvinfer1::DataType t, DType& out) noexcept {
    switch (t) {
        case nvinfer1::DataType::kFLOAT: out = DType::kFloat32; return true;
        case nvinfer1::DataType::kHALF: out = DType::kFloat16; return true;
        case nvinfer1::DataType::kBF16: out = DType::kBFloat16; return true;
        default: return false;
    }
}

// 0 on success; otherwise logs the launcher's status and returns it (non-zero) to TensorRT.
inline int32_t reportStatus(char const* plugin, Status s) noexcept {
    if (s == Status::kSuccess) return 0;
    logError(plugin, "kernel launcher failed with trtspec status " + std::to_string(static_cast<int>(s)));
    return static_cast<int32_t>(s);
}

// Dimension d of dims when it is known (>= 0), else `unknown`.
inline int64_t dim(nvinfer1::Dims const& dims, int32_t d, int64_t unknown = -1) noexcept {
    return d < dims.nbDims ? dims.d[d] : unknown;
}
// True when a and b are equal or one of them is unknown (-1, build time).
inline bool sameOrUnknown(int64_t a, int64_t b) noexcept { return a < 0 || b < 0 || a == b; }

inline size_t alignUp(size_t bytes, size_t to = 256) noexcept { return (bytes + to - 1) / to * to; }
inline void* alignPointer(void* p, size_t to = 256) noexcept {
    return reinterpret_cast<void*>(alignUp(reinterpret_cast<uintptr_t>(p), to));
}

template <typename Plugin, typename Fields>
class PluginBase : public nvinfer1::IPluginV3,
                   public nvinfer1::IPluginV3OneCore,
                   public nvinfer1::IPluginV3OneBuild,
                   public nvinfer1::IPluginV3OneRuntime {
public:
    using Attributes = std::array<int32_t, Fields::kNbAttributes>;

    explicit PluginBase(Attributes const& attributes) : mAttributes(attributes) {}
    PluginBase(PluginBase const& other)
        : nvinfer1::IPluginV3(), nvinfer1::IPluginV3OneCore(), nvinfer1::IPluginV3OneBuild(),
          nvinfer1::IPluginV3OneRuntime(), mAttributes(other.mAttributes), mNbInputs(other.mNbInputs) {}
    PluginBase& operator=(PluginBase const&) = delete;
    ~PluginBase() override = default;

    // IPluginV3
    nvinfer1::IPluginCapability* getCapabilityInterface(nvinfer1::PluginCapabilityType type) noexcept override {
        switch (type) {
            case nvinfer1::PluginCapabilityType::kCORE: return static_cast<nvinfer1::IPluginV3OneCore*>(this);
            case nvinfer1::PluginCapabilityType::kBUILD: return static_cast<nvinfer1::IPluginV3OneBuild*>(this);
            case nvinfer1::PluginCapabilityType::kRUNTIME: return static_cast<nvinfer1::IPluginV3OneRuntime*>(this);
        }
        return nullptr;
    }
    nvinfer1::IPluginV3* clone() noexcept override {
        try {
            return new Plugin(static_cast<Plugin const&>(*this));
        } catch (...) {
            return nullptr;
        }
    }

    // IPluginV3OneCore
    char const* getPluginName() const noexcept override { return Fields::kName; }
    char const* getPluginVersion() const noexcept override { return Fields::kVersion; }
    char const* getPluginNamespace() const noexcept override { return Fields::kNamespace; }

    // IPluginV3OneBuild
    int32_t getNbOutputs() const noexcept override { return Fields::kNbOutputs; }

    int32_t getOutputDataTypes(nvinfer1::DataType* outputTypes, int32_t nbOutputs, nvinfer1::DataType const*,
                               int32_t nbInputs) const noexcept override {
        if (!ioCountOk(nbInputs, nbOutputs)) return -1;
        for (int32_t i = 0; i < nbOutputs; ++i) outputTypes[i] = outputType(Fields::kOutputs[i].dtypes);
        return 0;
    }

    bool supportsFormatCombination(int32_t pos, nvinfer1::DynamicPluginTensorDesc const* inOut, int32_t nbInputs,
                                   int32_t nbOutputs) noexcept override {
        if (!ioCountOk(nbInputs, nbOutputs) || pos < 0 || pos >= nbInputs + nbOutputs) return false;
        nvinfer1::PluginTensorDesc const& d = inOut[pos].desc;
        if (d.format != nvinfer1::TensorFormat::kLINEAR) return false;
        uint32_t const allowed = pos < nbInputs ? Fields::kInputs[pos].dtypes : Fields::kOutputs[pos - nbInputs].dtypes;
        return (ioBit(d.type) & allowed) != 0;
    }

    int32_t configurePlugin(nvinfer1::DynamicPluginTensorDesc const* in, int32_t nbInputs,
                            nvinfer1::DynamicPluginTensorDesc const*, int32_t nbOutputs) noexcept override {
        if (!ioCountOk(nbInputs, nbOutputs)) return -1;
        nvinfer1::Dims dims[Fields::kNbInputs];
        for (int32_t i = 0; i < nbInputs; ++i) dims[i] = in[i].desc.dims;
        return acceptShapes(dims, nbInputs);
    }

    // IPluginV3OneRuntime
    int32_t onShapeChange(nvinfer1::PluginTensorDesc const* in, int32_t nbInputs, nvinfer1::PluginTensorDesc const*,
                          int32_t nbOutputs) noexcept override {
        if (!ioCountOk(nbInputs, nbOutputs)) return -1;
        nvinfer1::Dims dims[Fields::kNbInputs];
        for (int32_t i = 0; i < nbInputs; ++i) dims[i] = in[i].dims;
        return acceptShapes(dims, nbInputs);
    }

    nvinfer1::IPluginV3* attachToContext(nvinfer1::IPluginResourceContext*) noexcept override { return clone(); }

    nvinfer1::PluginFieldCollection const* getFieldsToSerialize() noexcept override {
        mSerialized.clear();
        for (int32_t i = 0; i < Fields::kNbAttributes; ++i)
            mSerialized.emplace_back(Fields::kAttributes[i].name, &mAttributes[i], nvinfer1::PluginFieldType::kINT32, 1);
        mSerializedCollection.nbFields = static_cast<int32_t>(mSerialized.size());
        mSerializedCollection.fields = mSerialized.data();
        return &mSerializedCollection;
    }

protected:
    static bool ioCountOk(int32_t nbInputs, int32_t nbOutputs) noexcept {
        return nbInputs >= Fields::kNbRequiredInputs && nbInputs <= Fields::kNbInputs && nbOutputs == Fields::kNbOutputs;
    }
    int32_t acceptShapes(nvinfer1::Dims const* dims, int32_t nbInputs) noexcept {
        try {
            std::string why;
            if (!static_cast<Plugin*>(this)->checkDims(dims, nbInputs, why)) {
                logError(Fields::kName, why);
                return -1;
            }
            mNbInputs = nbInputs;
            return 0;
        } catch (...) {
            return -1;
        }
    }
    bool hasInput(int32_t index) const noexcept { return index < mNbInputs; }

    Attributes mAttributes;
    int32_t mNbInputs{Fields::kNbRequiredInputs};

private:
    std::vector<nvinfer1::PluginField> mSerialized;
    nvinfer1::PluginFieldCollection mSerializedCollection{};
};

// The creator: attribute names from the Fields header; createPlugin validates every field
// (known name, int32/int64 scalar, within the YAML's range) and fills defaults for absent ones.
template <typename Plugin, typename Fields>
class CreatorBase : public nvinfer1::IPluginCreatorV3One {
public:
    CreatorBase() {
        for (int32_t i = 0; i < Fields::kNbAttributes; ++i)
            mFieldNames.emplace_back(Fields::kAttributes[i].name, nullptr, nvinfer1::PluginFieldType::kINT32, 1);
        mCollection.nbFields = static_cast<int32_t>(mFieldNames.size());
        mCollection.fields = mFieldNames.data();
    }

    char const* getPluginName() const noexcept override { return Fields::kName; }
    char const* getPluginVersion() const noexcept override { return Fields::kVersion; }
    char const* getPluginNamespace() const noexcept override { return Fields::kNamespace; }
    nvinfer1::PluginFieldCollection const* getFieldNames() noexcept override { return &mCollection; }

    nvinfer1::IPluginV3* createPlugin(char const*, nvinfer1::PluginFieldCollection const* fc,
                                      nvinfer1::TensorRTPhase) noexcept override {
        try {
            typename PluginBase<Plugin, Fields>::Attributes attributes{};
            for (int32_t i = 0; i < Fields::kNbAttributes; ++i) attributes[i] = Fields::kAttributes[i].defaultValue;
            for (int32_t f = 0; fc != nullptr && f < fc->nbFields; ++f) {
                nvinfer1::PluginField const& field = fc->fields[f];
                if (field.name == nullptr) continue;
                std::string const name(field.name);
                if (name == "plugin_version" || name == "plugin_namespace") continue;  // ONNX parser keys
                int32_t index = -1;
                for (int32_t i = 0; i < Fields::kNbAttributes; ++i)
                    if (name == Fields::kAttributes[i].name) index = i;
                if (index < 0) {
                    logError(Fields::kName, "unknown attribute '" + name + "'");
                    return nullptr;
                }
                int64_t value = 0;
                if (field.data != nullptr && field.length == 1 && field.type == nvinfer1::PluginFieldType::kINT32) {
                    value = *static_cast<int32_t const*>(field.data);
                } else if (field.data != nullptr && field.length == 1 &&
                           field.type == nvinfer1::PluginFieldType::kINT64) {
                    value = *static_cast<int64_t const*>(field.data);
                } else {
                    logError(Fields::kName, "attribute '" + name + "' must be one int32 (or int64) value");
                    return nullptr;
                }
                AttributeSpec const& spec = Fields::kAttributes[index];
                if (value < spec.minValue || value > spec.maxValue) {
                    logError(Fields::kName, "attribute '" + name + "' = " + std::to_string(value) + " outside [" +
                                                std::to_string(spec.minValue) + ", " + std::to_string(spec.maxValue) +
                                                "]");
                    return nullptr;
                }
                attributes[index] = static_cast<int32_t>(value);
            }
            return new Plugin(attributes);
        } catch (...) {
            return nullptr;
        }
    }

private:
    std::vector<nvinfer1::PluginField> mFieldNames;
    nvinfer1::PluginFieldCollection mCollection{};
};

}  // namespace plugin
}  // namespace trtspec
