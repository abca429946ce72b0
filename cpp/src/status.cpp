// statusString: stable, short descriptions of trtspec::Status.
#include "trtspec/status.h"

namespace trtspec {

const char* statusString(Status s) {
    switch (s) {
        case Status::kSuccess: return "success";
        case Status::kInvalidArgument: return "invalid argument: a size or pointer is out of its documented range";
        case Status::kInvalidTree:
            return "invalid tree: parents must satisfy parents[0] == -1 and 0 <= parents[i] < i, "
                   "and num_nodes must be in [1, N]";
        case Status::kInvalidToken: return "invalid token: a token id is outside [0, V)";
        case Status::kInvalidProbability:
            return "invalid probability: an entry is NaN, Inf or negative, or a row has no positive mass";
        case Status::kTreeTooDeep: return "tree too deep: a path does not fit in max_depth + 1 entries";
        case Status::kCudaError: return "CUDA error: a CUDA call or kernel launch failed";
        case Status::kNotCompiled: return "not compiled: this device path is not part of this build";
        case Status::kInvalidDraftLen: return "invalid draft length: every draft_lens[b] must be in [0, D]";
    }
    return "unknown status";
}

}  // namespace trtspec
