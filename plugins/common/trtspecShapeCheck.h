// Small helpers for the plugins' shape checks: each returns false and sets `why` to a message
// naming the input and what was expected. Unknown (-1) dimensions pass (build time).
#pragma once
#include <NvInferRuntime.h>

#include <string>

#include "common/trtspecPluginBase.h"

namespace trtspec {
namespace plugin {

inline bool checkRank(nvinfer1::Dims const& d, int32_t rank, char const* name, std::string& why) {
    if (d.nbDims == rank) return true;
    why = std::string("input '") + name + "' must have " + std::to_string(rank) + " dimensions, got " +
          std::to_string(d.nbDims);
    return false;
}

inline bool checkDim(int64_t actual, int64_t expected, char const* name, int32_t axis, std::string& why) {
    if (sameOrUnknown(actual, expected)) return true;
    why = std::string("input '") + name + "' dimension " + std::to_string(axis) + " is " + std::to_string(actual) +
          ", expected " + std::to_string(expected);
    return false;
}

inline bool checkRange(int64_t value, int64_t lo, int64_t hi, char const* what, std::string& why) {
    if (value < 0 || (value >= lo && value <= hi)) return true;
    why = std::string(what) + " = " + std::to_string(value) + " outside [" + std::to_string(lo) + ", " +
          std::to_string(hi) + "]";
    return false;
}

}  // namespace plugin
}  // namespace trtspec
