// trtspec::_row_sums: one pass over a probability tensor for the Python-side validation in
// trtspec/ops.py (CPU). For each row probs[b, i, :] with rows[b, i] (all rows when rows is None):
// the float64 sum of the row, or NaN if an entry is NaN, Inf or negative; unselected rows read as 1.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <optional>

#include "../src/cpu_common.h"

namespace {

// One pass: validity flags and a float64 sum in several independent chains (a check, not the
// kernels' bit-exact sequential sum).
double rowSum(const float* w, int64_t v) {
    int64_t i = 0;
    unsigned bad = 0;
    double s = 0.0;
#ifdef TRTSPEC_SSE2
    const __m128 zero = _mm_setzero_ps(), big = _mm_set1_ps(3.4028234663852886e38f);
    __m128 acc = _mm_setzero_ps();
    __m128d s0 = _mm_setzero_pd(), s1 = _mm_setzero_pd(), s2 = _mm_setzero_pd(), s3 = _mm_setzero_pd();
    for (; i + 8 <= v; i += 8) {
        const __m128 a = _mm_loadu_ps(w + i), b = _mm_loadu_ps(w + i + 4);
        acc = _mm_or_ps(acc, _mm_or_ps(_mm_cmpnge_ps(a, zero), _mm_cmpgt_ps(a, big)));
        acc = _mm_or_ps(acc, _mm_or_ps(_mm_cmpnge_ps(b, zero), _mm_cmpgt_ps(b, big)));
        s0 = _mm_add_pd(s0, _mm_cvtps_pd(a));
        s1 = _mm_add_pd(s1, _mm_cvtps_pd(_mm_movehl_ps(a, a)));
        s2 = _mm_add_pd(s2, _mm_cvtps_pd(b));
        s3 = _mm_add_pd(s3, _mm_cvtps_pd(_mm_movehl_ps(b, b)));
    }
    bad = static_cast<unsigned>(_mm_movemask_ps(acc));
    double lanes[2];
    _mm_storeu_pd(lanes, _mm_add_pd(_mm_add_pd(s0, s1), _mm_add_pd(s2, s3)));
    s = lanes[0] + lanes[1];
#endif
    for (; i < v; ++i) {
        bad |= static_cast<unsigned>(trtspec::detail::badProb(w[i]));
        s += w[i];
    }
    return bad ? std::numeric_limits<double>::quiet_NaN() : s;
}

at::Tensor rowSums(const at::Tensor& probs, const std::optional<at::Tensor>& rows) {
    TORCH_CHECK(probs.dim() == 3 && probs.scalar_type() == at::kFloat && probs.is_contiguous() && probs.is_cpu(),
                "trtspec::_row_sums: probs must be a contiguous float32 CPU tensor [B, N, V]");
    const int64_t B = probs.size(0), N = probs.size(1), V = probs.size(2);
    const bool* sel = nullptr;
    if (rows.has_value()) {
        TORCH_CHECK(rows->scalar_type() == at::kBool && rows->is_contiguous() && rows->is_cpu() && rows->dim() == 2 &&
                        rows->size(0) == B && rows->size(1) == N,
                    "trtspec::_row_sums: rows must be a contiguous bool CPU tensor [B, N]");
        sel = rows->data_ptr<bool>();
    }
    at::Tensor out = at::empty({B, N}, probs.options().dtype(at::kDouble));
    const float* p = probs.data_ptr<float>();
    double* o = out.data_ptr<double>();
    const int64_t grain = std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(V, 1));
    at::parallel_for(0, B * N, grain, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) o[r] = (sel && !sel[r]) ? 1.0 : rowSum(p + r * V, V);
    });
    return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(trtspec, m) {
    m.def("_row_sums(Tensor probs, Tensor? rows=None) -> Tensor");
}

TORCH_LIBRARY_IMPL(trtspec, CPU, m) { m.impl("_row_sums", &rowSums); }
