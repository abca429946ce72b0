// trtspec kernel status codes. Torch-free: included by the torch bindings and TensorRT plugins.
#pragma once

namespace trtspec {

enum class Status : int {
    kSuccess = 0,
    kInvalidArgument = 1,  // a size or pointer argument is out of its documented range
    kInvalidTree = 2,      // parents are not topological / out of range, or num_nodes out of range
    kInvalidToken = 3,     // a token id is outside [0, V)
    kInvalidProbability = 4,  // NaN/Inf/negative probability (checked by the CPU path)
    kTreeTooDeep = 5,      // an accepted path would not fit in max_depth + 1 entries
    kCudaError = 6,        // a CUDA call or launch failed (query cudaGetLastError for details)
    kNotCompiled = 7,      // the requested device path was not compiled into this build
    kInvalidDraftLen = 8,  // a draft_lens entry is outside [0, D]
};

// A short, stable description of a status (never null).
const char* statusString(Status s);

}  // namespace trtspec
