"""Measured cost tables (``trtspec profile``) that replace the analytic target/draft step times on a device.

Format (JSON)::

    {"format": "trtspec.cost_table/v1", "device": "h200", "source": "what was measured, where",
     "target": {"<B>": {"<tokens_per_request>": seconds, ...}, ...},
     "draft":  {"<B>": {"<tokens_per_request>": seconds, ...}, ...}}

``target[B][T]`` is one target forward (T = 1 + D tokens per request); ``draft[B][W]`` is one serial drafter step
with W tokens per request (W = 1 for chains; for one-pass drafters such as dflash, W = D and the entry is the whole
pass). Lookup: piecewise-linear interpolation in tokens (linear extrapolation past the last two measured points,
never below the smallest measured time), and linear interpolation in B between measured batch sizes; a batch size
outside the measured range is an error (no extrapolation in B).
"""
from __future__ import annotations

import bisect
import json
from dataclasses import dataclass
from pathlib import Path

from trtspec.recipes.errors import CalibrationError

FORMAT = "trtspec.cost_table/v1"


def _table(doc, key: str, path) -> dict:
    raw = doc.get(key)
    if not isinstance(raw, dict) or not raw:
        raise CalibrationError(f"{path}: '{key}' must map batch size -> {{tokens: seconds}}")
    out = {}
    try:
        for b, row in raw.items():
            pts = {int(t): float(s) for t, s in row.items()}
            if int(b) < 1 or not pts or any(t < 1 or s <= 0 for t, s in pts.items()):
                raise ValueError(f"batch {b}: need tokens >= 1 and seconds > 0")
            out[int(b)] = sorted(pts.items())
    except (TypeError, ValueError, AttributeError) as exc:
        raise CalibrationError(f"{path}: bad '{key}' table: {exc}") from exc
    return dict(sorted(out.items()))


def _interp_tokens(points: list, tokens: int) -> float:
    ts = [t for t, _ in points]
    if len(points) == 1:
        return points[0][1]
    i = bisect.bisect_left(ts, tokens)
    if i < len(ts) and ts[i] == tokens:
        return points[i][1]
    i = min(max(i, 1), len(ts) - 1)
    (t0, s0), (t1, s1) = points[i - 1], points[i]
    value = s0 + (s1 - s0) * (tokens - t0) / (t1 - t0)
    return max(value, min(s for _, s in points))


def _lookup(table: dict, batch: int, tokens: int, what: str, path) -> float:
    bs = list(table)
    if batch in table:
        return _interp_tokens(table[batch], tokens)
    if batch < bs[0] or batch > bs[-1]:
        raise CalibrationError(f"{path}: {what} table covers batch sizes {bs[0]}..{bs[-1]}, not {batch}")
    i = bisect.bisect_left(bs, batch)
    b0, b1 = bs[i - 1], bs[i]
    s0, s1 = _interp_tokens(table[b0], tokens), _interp_tokens(table[b1], tokens)
    return s0 + (s1 - s0) * (batch - b0) / (b1 - b0)


@dataclass(frozen=True)
class CostTable:
    device: str
    target: dict
    draft: dict
    source: str
    path: str = ""

    def target_time(self, batch: int, tokens: int) -> float:
        """Seconds of one target forward with ``tokens`` per request."""
        return _lookup(self.target, batch, tokens, "target", self.path)

    def draft_step_time(self, batch: int, width: int) -> float:
        """Seconds of one drafter step with ``width`` tokens per request."""
        return _lookup(self.draft, batch, width, "draft", self.path)


def load_cost_table(path) -> CostTable:
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CalibrationError(f"cannot read cost table {path}: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CalibrationError(f"{path}: expected a JSON object with format {FORMAT!r}")
    if not str(doc.get("source") or "").strip() or not str(doc.get("device") or "").strip():
        raise CalibrationError(f"{path}: 'device' and 'source' are required")
    return CostTable(device=str(doc["device"]), target=_table(doc, "target", path), draft=_table(doc, "draft", path),
                     source=str(doc["source"]), path=str(path))
