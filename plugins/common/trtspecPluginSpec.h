// Types of the generated plugin interface headers (plugins/<folder>/<folder>Fields.h).
// TensorRT-free, so the generated headers can be compiled and tested without TensorRT.
#pragma once
#include <cstdint>

namespace trtspec {
namespace plugin {

// Bit set of the dtypes an input or output accepts.
enum IoType : uint32_t {
    kIoFloat32 = 1u << 0,
    kIoFloat16 = 1u << 1,
    kIoBFloat16 = 1u << 2,
    kIoInt32 = 1u << 3,
    kIoInt64 = 1u << 4,
};

struct IoSpec {
    char const* name;
    uint32_t dtypes;  // IoType bits
};

// A scalar int32 attribute (PluginFieldType::kINT32, length 1) with its default and range.
struct AttributeSpec {
    char const* name;
    int32_t defaultValue;
    int32_t minValue;
    int32_t maxValue;
};

}  // namespace plugin
}  // namespace trtspec
