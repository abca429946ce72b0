"""The trtspec plugin nodes as onnxruntime-extensions custom ops, bound to :mod:`trtspec.ops`.

onnxruntime cannot load TensorRT plugins, so on CPU the ``trtspec::TrtSpecTreeMask`` and
``trtspec::TrtSpecVerifyGreedy`` nodes run as onnxruntime-extensions Python ops. An exception
raised inside such an op ends the whole process, so each op validates its inputs first and,
like the plugins on an invalid request, writes the documented "invalid" outputs for that request
(depth -1; accepted_len 0, accepted_nodes -1, bonus_token -1) instead of raising. Callers check
for them (:func:`trtspec.onnx.loop.check_verdict`).
"""
from __future__ import annotations

import functools

import numpy as np

PLUGIN_ATTRS = ("plugin_version", "plugin_namespace")


def valid_trees(parents: np.ndarray) -> np.ndarray:
    """bool ``[B]``: ``parents[b, 0] == -1`` and ``0 <= parents[b, i] < i`` for every i >= 1."""
    B, N = parents.shape
    idx = np.arange(N)[None, :]
    ok = (parents >= 0) & (parents < idx)
    ok[:, 0] = parents[:, 0] == -1
    return ok.all(axis=1)


def tree_mask(parents: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """TrtSpecTreeMask on CPU: packed_mask int32 ``[B, N, ceil(N/32)]``, depth int32 ``[B, N]``."""
    import torch

    from trtspec import ops

    parents = np.ascontiguousarray(parents, dtype=np.int32)
    B, N = parents.shape
    mask = np.zeros((B, N, (N + 31) // 32), dtype=np.int32)
    depth = np.full((B, N), -1, dtype=np.int32)
    ok = valid_trees(parents)
    if ok.any():
        m, d, _, _ = ops.tree_metadata(torch.from_numpy(parents[ok]))
        mask[ok], depth[ok] = m.numpy(), d.numpy()
    return mask, depth


def verify_greedy(tokens: np.ndarray, parents: np.ndarray, logits: np.ndarray, max_depth: int):
    """TrtSpecVerifyGreedy on CPU: accepted_len int32 ``[B]``, accepted_nodes int32 ``[B, L]``, bonus int64 ``[B]``."""
    import torch

    from trtspec import ops

    tokens = np.ascontiguousarray(tokens, dtype=np.int64)
    parents = np.ascontiguousarray(parents, dtype=np.int32)
    B, N = parents.shape
    V = logits.shape[-1] if logits.ndim == 3 else 0
    L = (N - 1 if max_depth < 0 else max_depth) + 1
    accepted_len = np.zeros(B, dtype=np.int32)
    accepted_nodes = np.full((B, L), -1, dtype=np.int32)
    bonus = np.full(B, -1, dtype=np.int64)
    shapes_ok = tokens.shape == (B, N) and logits.ndim == 3 and logits.shape[:2] == (B, N) and V > 0 and L <= N
    if not shapes_ok:
        return accepted_len, accepted_nodes, bonus
    ok = valid_trees(parents) & ((tokens[:, 1:] >= 0) & (tokens[:, 1:] < V)).all(axis=1)
    if ok.any():
        _, depth = tree_mask(parents[ok])
        ok_idx = np.nonzero(ok)[0][depth.max(axis=1) <= L - 1]   # a deeper tree cannot be reported
        if ok_idx.size:
            a, n, t = ops.verify_greedy(torch.from_numpy(tokens[ok_idx]), torch.from_numpy(parents[ok_idx]),
                                        torch.from_numpy(np.ascontiguousarray(logits[ok_idx])), max_depth=L - 1)
            accepted_len[ok_idx], accepted_nodes[ok_idx], bonus[ok_idx] = a.numpy(), n.numpy(), t.numpy()
    return accepted_len, accepted_nodes, bonus


@functools.cache
def library_path() -> str:
    """Register the ops with onnxruntime-extensions (once) and return its custom-op library path."""
    from onnxruntime_extensions import PyCustomOpDef, get_library_path, onnx_op

    strings = {k: PyCustomOpDef.dt_string for k in PLUGIN_ATTRS}

    @onnx_op(op_type="trtspec::TrtSpecTreeMask", inputs=[PyCustomOpDef.dt_int32],
             outputs=[PyCustomOpDef.dt_int32, PyCustomOpDef.dt_int32], attrs=strings)
    def _tree_mask(parents, **_attrs):
        return tree_mask(parents)

    @onnx_op(op_type="trtspec::TrtSpecVerifyGreedy",
             inputs=[PyCustomOpDef.dt_int64, PyCustomOpDef.dt_int32, PyCustomOpDef.dt_float],
             outputs=[PyCustomOpDef.dt_int32, PyCustomOpDef.dt_int32, PyCustomOpDef.dt_int64],
             attrs={**strings, "max_depth": PyCustomOpDef.dt_int64})
    def _verify_greedy(tokens, parents, logits, **attrs):
        return verify_greedy(tokens, parents, logits, int(attrs.get("max_depth", -1)))

    return get_library_path()


def session(path: str, threads: int = 0):
    """An onnxruntime CPU session for a trtspec graph, with the plugin nodes bound."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.register_custom_ops_library(library_path())
    if threads:
        opts.intra_op_num_threads = threads
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
