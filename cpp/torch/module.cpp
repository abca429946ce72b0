// The trtspec::* op schemas and the Python module trtspec._C (importing it registers the ops).
#include <Python.h>
#include <torch/library.h>

extern "C" {
// No Python functions: the ops are reached through torch.ops.trtspec.*.
PyObject* PyInit__C(void) {
    static struct PyModuleDef moduleDef = {PyModuleDef_HEAD_INIT, "_C", "trtspec kernels (torch.ops.trtspec)", -1,
                                           nullptr};
    return PyModule_Create(&moduleDef);
}
}

TORCH_LIBRARY(trtspec, m) {
    // Shapes and dtypes: see trtspec/ops.py (the Python wrappers validate before calling these).
    m.def("tree_metadata(Tensor parents, Tensor? num_nodes=None) -> (Tensor, Tensor, Tensor, Tensor)");
    m.def("verify_greedy(Tensor tokens, Tensor parents, Tensor target_logits, Tensor? num_nodes=None, "
          "int? max_depth=None) -> (Tensor, Tensor, Tensor)");
    m.def("verify_sample(Tensor draft_tokens, Tensor parents, Tensor target_probs, Tensor draft_probs, Tensor seed, "
          "Tensor offset, bool siblings_without_replacement=False, Tensor? draft_lens=None, int? max_depth=None) "
          "-> (Tensor, Tensor, Tensor)");
    m.def("verify_block(Tensor draft_tokens, Tensor target_probs, Tensor draft_probs, Tensor seed, Tensor offset, "
          "Tensor? draft_lens=None) -> (Tensor, Tensor)");
    m.def("accepted_kv_indices(Tensor accepted_nodes, Tensor accepted_len, Tensor cache_lens) "
          "-> (Tensor, Tensor, Tensor)");
}
