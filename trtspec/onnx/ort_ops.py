"""The trtspec plugin nodes as onnxruntime-extensions custom ops, bound to :mod:`trtspec.ops`.

onnxruntime cannot load TensorRT plugins, so on CPU the ``trtspec::TrtSpecTreeMask``,
``TrtSpecVerifyGreedy``, ``TrtSpecVerifySample`` and ``TrtSpecVerifyBlock`` nodes run as
onnxruntime-extensions Python ops. An exception raised inside such an op ends the whole process,
so each op validates its inputs first and, like the plugins on an invalid request, writes the
documented "invalid" outputs for that request (depth -1; accepted_len 0, accepted_nodes -1,
bonus_token -1) instead of raising. Callers check for them (:func:`trtspec.onnx.loop.check_verdict`).

The sampled ops run on the valid requests only; since every request draws from its own stream
(``seed[b]``, ``offset[b]``), that gives each of them exactly its verdict within the whole batch.
onnxruntime-extensions Python ops have a fixed arity, one dtype per input and no attribute
defaults, so under onnxruntime the sampled nodes take every input (``draft_lens`` included), int64
draft tokens and every attribute (the plugins also take int32 ids and may omit ``draft_lens`` and
the attributes).
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


def _rows_ok(probs: np.ndarray, read: np.ndarray) -> np.ndarray:
    """bool ``[B]``: every row ``probs[b, i]`` with ``read[b, i]`` finite, >= 0 and summing to 1
    within the ops' tolerance (the other rows are never read)."""
    from trtspec.ops import ROW_SUM_TOLERANCE

    rows = probs.astype(np.float64)
    with np.errstate(invalid="ignore"):
        good = np.isfinite(rows).all(-1) & (rows >= 0).all(-1) & (np.abs(rows.sum(-1) - 1.0) <= ROW_SUM_TOLERANCE)
    return (good | ~read).all(axis=1)


def _sampled_ok(draft_tokens, target, draft, seed, offset, draft_lens):
    """Shapes of the sampled ops' one layout; returns (B, D, V) or None, and per request: d, used [B, D+1]."""
    if draft_tokens.ndim != 2 or target.ndim != 3 or draft.ndim != 3:
        return None
    B, D = draft_tokens.shape
    V = target.shape[2]
    if target.shape[:2] != (B, D + 1) or draft.shape != (B, D, V) or V < 1 or any(
            t.shape != (B,) for t in (seed, offset, draft_lens)):
        return None
    return B, D, V


def _sampled_requests(draft_tokens, target, draft, draft_lens, read_drafts):
    """bool ``[B]``: draft_lens in [0, D], used tokens in [0, V), rows read valid. ``read_drafts``
    ``[B, D]`` marks the draft rows the op reads among the used ones."""
    B, D = draft_tokens.shape
    V = target.shape[2]
    lens_ok = (draft_lens >= 0) & (draft_lens <= D)
    d = np.where(lens_ok, draft_lens, 0)
    used = np.arange(D + 1)[None, :] <= d[:, None]                       # nodes 0..d
    tokens_ok = (((draft_tokens >= 0) & (draft_tokens < V)) | ~used[:, 1:]).all(axis=1)
    return lens_ok & tokens_ok & _rows_ok(target, used) & _rows_ok(draft, used[:, 1:] & read_drafts), used


def _tree_requests(parents, used, max_depth, without_replacement):
    """bool ``[B]`` (tree valid on its used nodes, depth <= max_depth) and the draft rows read ``[B, D]``."""
    B, N = parents.shape
    ok = parents[:, 0] == -1
    depth = np.zeros((B, N), dtype=np.int64)
    first = np.ones((B, N), dtype=bool)   # node i is the first child of its parent
    for i in range(1, N):
        p = parents[:, i]
        good = (p >= 0) & (p < i)
        ok &= good | ~used[:, i]
        pc = np.clip(p, 0, i - 1)
        depth[:, i] = depth[np.arange(B), pc] + 1
        first[:, i] = ~((parents[:, 1:i] == p[:, None]).any(axis=1))
    ok &= (np.where(used, depth, 0) <= max_depth).all(axis=1)
    read = np.ones((B, N - 1), dtype=bool) if not without_replacement else first[:, 1:]
    return ok, read


def verify_sample(draft_tokens, parents, target, draft, seed, offset, draft_lens, max_depth: int,
                  siblings_without_replacement: int):
    """TrtSpecVerifySample on CPU: accepted_len int32 ``[B]``, accepted_nodes int32 ``[B, L]``, bonus int64 ``[B]``."""
    import torch

    from trtspec import ops

    B = draft_tokens.shape[0] if draft_tokens.ndim == 2 else 0
    D = draft_tokens.shape[1] if draft_tokens.ndim == 2 else 0
    depth_bound = D if max_depth < 0 else max_depth
    L = depth_bound + 1
    accepted_len = np.zeros(B, dtype=np.int32)
    accepted_nodes = np.full((B, L), -1, dtype=np.int32)
    bonus = np.full(B, -1, dtype=np.int64)
    shapes = _sampled_ok(draft_tokens, target, draft, seed, offset, draft_lens)
    if shapes is None or parents.shape != (B, D + 1) or D + 1 > ops.MAX_NODES or L > ops.MAX_NODES:
        return accepted_len, accepted_nodes, bonus
    lens = np.clip(draft_lens, 0, D)
    tree_ok, read = _tree_requests(parents, np.arange(D + 1)[None, :] <= lens[:, None], depth_bound,
                                   bool(siblings_without_replacement))
    rows_ok, _ = _sampled_requests(draft_tokens, target, draft, draft_lens, read)
    idx = np.nonzero(tree_ok & rows_ok)[0]
    if idx.size:
        a, n, t = ops.verify_sample(*(torch.from_numpy(np.ascontiguousarray(x[idx])) for x in (
            draft_tokens, parents, target, draft, seed, offset)), bool(siblings_without_replacement),
            torch.from_numpy(np.ascontiguousarray(draft_lens[idx])), depth_bound, validate=False)
        accepted_len[idx], accepted_nodes[idx], bonus[idx] = a.numpy(), n.numpy(), t.numpy()
    return accepted_len, accepted_nodes, bonus


def verify_block(draft_tokens, target, draft, seed, offset, draft_lens):
    """TrtSpecVerifyBlock on CPU: accepted_len int32 ``[B]``, bonus int64 ``[B]``."""
    import torch

    from trtspec import ops

    B = draft_tokens.shape[0] if draft_tokens.ndim == 2 else 0
    accepted_len = np.zeros(B, dtype=np.int32)
    bonus = np.full(B, -1, dtype=np.int64)
    shapes = _sampled_ok(draft_tokens, target, draft, seed, offset, draft_lens)
    if shapes is None or shapes[1] > ops.MAX_BLOCK_DRAFT:
        return accepted_len, bonus
    ok, _ = _sampled_requests(draft_tokens, target, draft, draft_lens, np.ones(draft_tokens.shape, dtype=bool))
    idx = np.nonzero(ok)[0]
    if idx.size:
        a, t = ops.verify_block(*(torch.from_numpy(np.ascontiguousarray(x[idx])) for x in (
            draft_tokens, target, draft, seed, offset, draft_lens)), validate=False)
        accepted_len[idx], bonus[idx] = a.numpy(), t.numpy()
    return accepted_len, bonus


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

    i64, i32, f32 = PyCustomOpDef.dt_int64, PyCustomOpDef.dt_int32, PyCustomOpDef.dt_float

    @onnx_op(op_type="trtspec::TrtSpecVerifySample", inputs=[i64, i32, f32, f32, i64, i64, i32],
             outputs=[i32, i32, i64],
             attrs={**strings, "max_depth": i64, "siblings_without_replacement": i64})
    def _verify_sample(draft_tokens, parents, target, draft, seed, offset, draft_lens, **attrs):
        return verify_sample(draft_tokens, parents, target, draft, seed, offset, draft_lens,
                             int(attrs.get("max_depth", -1)), int(attrs.get("siblings_without_replacement", 0)))

    @onnx_op(op_type="trtspec::TrtSpecVerifyBlock", inputs=[i64, f32, f32, i64, i64, i32], outputs=[i32, i64],
             attrs=strings)
    def _verify_block(draft_tokens, target, draft, seed, offset, draft_lens, **_attrs):
        return verify_block(draft_tokens, target, draft, seed, offset, draft_lens)

    return get_library_path()


def session(path: str, threads: int = 0):
    """An onnxruntime CPU session for a trtspec graph, with the plugin nodes bound."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.register_custom_ops_library(library_path())
    # Keep Q/DQ pairs as the graph states them (quantize, dequantize, float maths): onnxruntime's QDQ fusion runs
    # int8 GEMMs whose u8s8 path saturates 16-bit partial sums on x86 CPUs without VNNI (AVX2 only), which moved
    # logits by 4e-2 on such a machine; the graphs are references for what TensorRT computes, not a CPU speed path.
    opts.add_session_config_entry("session.disable_quant_qdq", "1")
    if threads:
        opts.intra_op_num_threads = threads
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
