"""Acceptance profiles: per-position conditional acceptance rates a_k, or a measured AL curve, and E[AL].

Definitions (``design.md``): a_k = P(draft k accepted | drafts 1..k-1 accepted); the joint rate
J_k = P(accept >= k) = prod_{i<=k} a_i; AL counts the bonus token, so for a chain of D drafts
``E[AL](D) = 1 + sum_{k<=D} J_k`` (1 <= E[AL] <= D+1). Conversions (exact inverses of each other where the
data allows): ``joint_from_rates`` / ``rates_from_joint`` (a_k = J_k / J_{k-1}), ``curve_from_rates`` and
``joint_from_curve`` (J_k = AL(k) - AL(k-1) for a chain-consistent curve, see below).

Sources, in the order ``parse_acceptance`` tries them:

* ``rates=0.8,0.7,0.6`` -- a_1..a_n given inline;
* ``curve=1.78,2.38,2.83`` -- the mean AL measured at D = 1, 2, 3, ... (one run per D; the form InferenceX and
  SPEED-Bench publish); see "curves" below;
* ``al=2.4@3`` -- a mean AL measured at draft length D, spread over positions by the **geometric rule**: one
  constant rate a with ``1 + a + a^2 + ... + a^D = AL`` (solved by bisection); the measured AL is reproduced
  exactly at that D;
* ``prior:NAME`` -- ``recipes/priors/NAME.yaml``: ``rates`` or a ``curve`` from a published figure, with its source;
* a path to a JSON profile written by ``trtspec bench`` (format ``trtspec.acceptance/v1``; ``rates``, or a
  ``curve``, or both when they agree).

Positions past the last given rate reuse the last rate (stated in every recipe's provenance as ``extrapolated``).

**Curves.** A curve-backed profile makes no independence assumption: ``expected_al(D)`` (and ``al_curve``) return
the measured AL(D) itself for 1 <= D <= n, and **hold it flat** past the curve (AL(D) = AL(n) for D > n: no gain
is credited for drafts nobody measured, so the optimizer never picks D > n). A curve may fall (DSpark-style block
drafters, where a longer block can lower AL, or noise between separate runs): the chain values stay as measured,
so a falling D costs more for a lower AL and is never chosen. ``rate(k)`` / ``joint(k)`` -- what tree evaluation
and the optimizer's binding-rule text read -- come from the curve's **least concave majorant** (upper hull of
(0, 1), (1, AL(1)), ..., (n, AL(n))), slopes floored at 0: the best prefix-consistent chain that reaches every
measured point. Its J_k are non-increasing in [0, 1], so every a_k is in [0, 1] (never a negative "rate"); where
the curve is non-decreasing and concave (``chain_consistent``) the rates reproduce it exactly, elsewhere they lie
above it between hull points and stay flat past a peak. Past the curve rate(k) = 0, so trees stop at depth n.
For tree drafters an optional ``rank_weights`` w_r (w_1 = 1, non-increasing) gives the Sequoia-style positional
acceptance of the rank-r sibling at depth d as ``a_d * w_r``.
"""
from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from trtspec.recipes.errors import AcceptanceError
from trtspec.recipes.paths import book_dir

FORMAT = "trtspec.acceptance/v1"
_TOL = 1e-9          # float slack of the identities below
_AGREE = 1e-5        # rates written next to a curve (rounded to 6 digits) must match the curve's rates this closely


# ---------------------------------------------------------------------------------------------------------------
# conversions: rates a_k <-> joint J_k <-> curve AL(D)


def _numbers(values, what: str) -> tuple:
    out = []
    for i, x in enumerate(values):
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
            raise AcceptanceError(f"{what}: entry {i + 1} must be a finite number, got {x!r}")
        out.append(float(x))
    if not out:
        raise AcceptanceError(f"{what}: needs at least one value")
    return tuple(out)


def joint_from_rates(rates) -> tuple:
    """(J_1, ..., J_n) with J_k = prod_{i<=k} a_i."""
    out, p = [], 1.0
    for a in rates:
        p *= float(a)
        out.append(p)
    return tuple(out)


def rates_from_joint(joint) -> tuple:
    """a_k = J_k / J_{k-1} (J_0 = 1); a position after J = 0 gets a_k = 0. Needs 1 >= J_1 >= J_2 >= ... >= 0."""
    joint = _numbers(joint, "joint acceptance")
    out, prev = [], 1.0
    for k, j in enumerate(joint, start=1):
        if not -_TOL <= j <= prev + _TOL:
            raise AcceptanceError(f"joint acceptance J_{k} = {j} must be in [0, J_{k - 1} = {prev}] "
                                  "(P(accept >= k) cannot grow with k)")
        j = min(max(j, 0.0), prev)
        out.append(j / prev if prev > 0 else 0.0)
        prev = j
    return tuple(min(a, 1.0) for a in out)


def curve_from_rates(rates, max_len: int | None = None) -> tuple:
    """(AL(1), ..., AL(max_len)) of a chain with conditional rates ``rates`` (default: len(rates) points; positions
    past the rates reuse the last one, as ``AcceptanceProfile.rate`` does)."""
    rates = tuple(rates)
    n = len(rates) if max_len is None else max_len
    out, total, p = [], 1.0, 1.0
    for k in range(1, n + 1):
        p *= rates[min(k, len(rates)) - 1]
        total += p
        out.append(total)
    return tuple(out)


def check_curve(curve, what: str = "acceptance curve") -> tuple:
    """``curve`` as floats, each AL(D) (D = 1, 2, ...) in [1, D+1]; raises ``AcceptanceError`` naming the D."""
    curve = _numbers(curve, what)
    for d, al in enumerate(curve, start=1):
        if not 1.0 <= al <= d + 1 + _TOL:
            raise AcceptanceError(f"{what}: AL at D={d} must be in [1, {d + 1}] (AL counts the bonus token), got {al}")
    return curve


def joint_from_curve(curve) -> tuple:
    """J_1..J_n of the curve's least concave majorant (module docstring), slopes floored at 0.

    For a non-decreasing concave curve this is exactly J_k = AL(k) - AL(k-1) (AL(0) = 1)."""
    curve = check_curve(curve)
    pts = [(0, 1.0)] + [(d, al) for d, al in enumerate(curve, start=1)]
    hull: list = []
    for x, y in pts:  # upper hull, x increasing: drop a vertex on or below the chord that skips it
        while len(hull) >= 2:
            (x0, y0), (x1, y1) = hull[-2], hull[-1]
            if (x1 - x0) * (y - y0) - (y1 - y0) * (x - x0) >= -_TOL * (x - x0):
                hull.pop()
            else:
                break
        hull.append((x, y))
    out = []
    for (x0, y0), (x1, y1) in zip(hull, hull[1:]):
        slope = max(0.0, (y1 - y0) / (x1 - x0))
        out.extend([min(slope, 1.0)] * (x1 - x0))
    for k in range(1, len(out)):  # float noise only: the hull's slopes do not increase
        out[k] = min(out[k], out[k - 1])
    return tuple(out)


def rates_from_curve(curve) -> tuple:
    """a_1..a_n of the curve's least concave majorant (``rates_from_joint(joint_from_curve(curve))``)."""
    return rates_from_joint(joint_from_curve(curve))


# ---------------------------------------------------------------------------------------------------------------
# the profile


@dataclass(frozen=True)
class AcceptanceProfile:
    """Conditional acceptance rates ``rates`` (a_1..a_n, each in [0, 1]) with their ``source`` (free text).

    With ``curve`` (AL at D = 1..n) the profile is curve-backed (module docstring): ``rates`` may be left empty and
    are then derived from the curve; if given, they must equal the derived ones."""

    rates: tuple = ()
    source: str = ""
    drafter: str | None = None
    rank_weights: tuple | None = None
    per_category: dict = field(default_factory=dict, compare=False)
    name: str = ""
    curve: tuple | None = None

    def __post_init__(self):
        if self.curve is not None:
            curve = check_curve(self.curve, f"acceptance curve of {self.name or self.source or 'the profile'}")
            derived = rates_from_curve(curve)
            if self.rates and (len(self.rates) != len(derived)
                               or any(abs(float(a) - b) > _AGREE for a, b in zip(self.rates, derived))):
                raise AcceptanceError(f"acceptance rates {list(self.rates)} disagree with the rates of curve "
                                      f"{list(curve)} ({[round(a, 6) for a in derived]}); give one of them")
            object.__setattr__(self, "curve", curve)
            object.__setattr__(self, "rates", derived)
        if not self.rates:
            raise AcceptanceError("acceptance profile needs at least one rate a_1 (or a curve AL(1), AL(2), ...)")
        for i, a in enumerate(self.rates):
            if isinstance(a, bool) or not isinstance(a, (int, float)) or not 0.0 <= a <= 1.0:
                raise AcceptanceError(f"acceptance rate a_{i + 1} must be a number in [0, 1], got {a!r}")
        if not str(self.source).strip():
            raise AcceptanceError("acceptance profile needs a source (what was measured, where, or the published figure)")
        if self.rank_weights is not None:
            w = self.rank_weights
            if not w or abs(w[0] - 1.0) > 1e-9 or any(not 0 < x <= 1 for x in w) or any(b > a for a, b in zip(w, w[1:])):
                raise AcceptanceError(f"rank_weights must start at 1.0 and be non-increasing in (0, 1], got {w}")
            if max(self.rates) * sum(w) > 1.0 + 1e-9:
                k = max(range(len(self.rates)), key=lambda i: self.rates[i]) + 1
                where = (f"; this curve's rates (its least concave majorant) reach a_{k} = {self.rates[k - 1]:.3f}"
                         if self.curve is not None else "")
                raise AcceptanceError("rank_weights too large: a_d * sum(rank_weights) must be <= 1 (sibling "
                                      f"acceptances are exclusive events){where}")

    @property
    def chain_consistent(self) -> bool:
        """True for a rates profile, and for a curve that its rates reproduce exactly (non-decreasing, concave)."""
        if self.curve is None:
            return True
        return all(abs(a - b) <= 1e-6 for a, b in zip(curve_from_rates(self.rates), self.curve))

    @property
    def extrapolation(self) -> str:
        """What the profile answers past its data, in words (for provenance and docs)."""
        n = len(self.curve if self.curve is not None else self.rates)
        if self.curve is not None:
            return f"AL held flat at AL({n}) = {self.curve[-1]:.3g} past D={n}; a_k = 0 for k > {n}"
        return f"a_k = a_{n} for k > {n}"

    def rate(self, k: int) -> float:
        """a_k for k >= 1 (rates profile: positions past it reuse the last rate; curve: 0 past the curve)."""
        if k < 1:
            raise AcceptanceError(f"draft position k must be >= 1, got {k}")
        if self.curve is not None and k > len(self.curve):
            return 0.0
        return float(self.rates[min(k, len(self.rates)) - 1])

    def joint(self, k: int) -> float:
        """P(accept >= k) = prod_{i<=k} a_i."""
        p = 1.0
        for i in range(1, k + 1):
            p *= self.rate(i)
        return p

    def expected_al(self, draft_len: int) -> float:
        """E[AL] of a chain of ``draft_len`` drafts, bonus token included (a curve: its measured value)."""
        if draft_len < 0:
            raise AcceptanceError(f"draft_len must be >= 0, got {draft_len}")
        if self.curve is not None:
            return 1.0 if draft_len == 0 else self.curve[min(draft_len, len(self.curve)) - 1]
        total, p = 1.0, 1.0
        for k in range(1, draft_len + 1):
            p *= self.rate(k)
            total += p
        return total

    def al_curve(self, max_len: int) -> list[float]:
        """[E[AL](0), ..., E[AL](max_len)] in one pass."""
        if self.curve is not None:
            return [self.expected_al(d) for d in range(max_len + 1)]
        return [1.0, *curve_from_rates(self.rates, max_len)]

    def for_category(self, category: str) -> "AcceptanceProfile":
        """The profile of one workload category (``per_category[category]``: ``rates`` or ``curve``); raises if
        absent."""
        entry = self.per_category.get(category)
        if not isinstance(entry, dict) or not (entry.get("rates") or entry.get("curve")):
            raise AcceptanceError(f"acceptance {self.name or self.source!r} has no rates for category {category!r}; "
                                  f"categories: {', '.join(sorted(self.per_category)) or '(none)'}")
        return AcceptanceProfile(**_rates_or_curve(entry, f"category {category}"), drafter=self.drafter,
                                 source=f"{self.source} [category {category}]", rank_weights=self.rank_weights,
                                 name=f"{self.name}[{category}]")

    def to_dict(self) -> dict:
        d = {"rates": [round(float(a), 6) for a in self.rates], "source": self.source}
        if self.curve is not None:
            d["curve"] = [float(al) for al in self.curve]
        if self.name:
            d["name"] = self.name
        if self.rank_weights:
            d["rank_weights"] = list(self.rank_weights)
        return d


def spread_al(al: float, draft_len: int) -> tuple:
    """Geometric rule: the constant rate a with ``1 + a + ... + a^D = al`` (D = ``draft_len``)."""
    if draft_len < 1:
        raise AcceptanceError(f"al=A@D needs D >= 1, got D={draft_len}")
    if not 1.0 <= al <= draft_len + 1:
        raise AcceptanceError(f"al=A@D needs 1 <= A <= D+1 (AL counts the bonus token), got A={al}, D={draft_len}")
    f = lambda a: sum(a ** k for k in range(draft_len + 1))  # noqa: E731
    lo, hi = 0.0, 1.0
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) < al else (lo, mid)
    return ((lo + hi) / 2,) * draft_len


# ---------------------------------------------------------------------------------------------------------------
# sources: priors, files, inline specs


def _rates_or_curve(doc: dict, where: str) -> dict:
    """``{"rates": ..., "curve": ...}`` keyword arguments of a prior / file / dict entry (one of them required)."""
    if not doc.get("rates") and not doc.get("curve"):
        raise AcceptanceError(f"{where}: needs 'rates' (a_1..a_D) or 'curve' (AL at D = 1, 2, ...)")
    curve = doc.get("curve")
    if curve is not None and not isinstance(curve, (list, tuple)):
        raise AcceptanceError(f"{where}: 'curve' must be a list of AL values at D = 1, 2, ..., got {curve!r}")
    rates = doc.get("rates") or ()
    if not isinstance(rates, (list, tuple)):
        raise AcceptanceError(f"{where}: 'rates' must be a list of a_k values, got {rates!r}")
    return {"rates": tuple(float(a) if isinstance(a, (int, float)) and not isinstance(a, bool) else a for a in rates),
            "curve": tuple(curve) if curve else None}


@functools.lru_cache(maxsize=None)
def _prior_docs() -> dict:
    out = {}
    for path in sorted((book_dir() / "priors").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        out[str(doc.get("name", path.stem))] = (path, doc)
    return out


def prior_names() -> list[str]:
    return sorted(_prior_docs())


def load_prior(name: str) -> AcceptanceProfile:
    """``recipes/priors/<name>.yaml`` as a profile; each prior must carry ``source``, ``derivation``, ``drafter``
    and ``rates`` or ``curve``."""
    docs = _prior_docs()
    if name not in docs:
        raise AcceptanceError(f"unknown acceptance prior {name!r}; known priors: {', '.join(prior_names()) or '(none)'}")
    path, doc = docs[name]
    for key in ("source", "derivation", "drafter"):
        if not doc.get(key):
            raise AcceptanceError(f"{path}: prior lacks '{key}'")
    return AcceptanceProfile(
        **_rates_or_curve(doc, str(path)), source=f"prior:{name} -- {doc['source']} ({doc['derivation']})",
        drafter=doc["drafter"], rank_weights=tuple(doc["rank_weights"]) if doc.get("rank_weights") else None,
        per_category=doc.get("per_category") or {}, name=f"prior:{name}",
    )


def default_prior(drafter: str, model_name: str) -> AcceptanceProfile | None:
    """The prior that names this (drafter, model) in its ``applies_to`` list, else None (never a guess)."""
    for name, (_, doc) in _prior_docs().items():
        if doc.get("drafter") == drafter and model_name in (doc.get("applies_to") or []):
            return load_prior(name)
    return None


def load_profile_file(path: str | Path) -> AcceptanceProfile:
    """A ``trtspec.acceptance/v1`` JSON (or YAML) profile file: ``rates``, ``curve`` or both (when they agree)."""
    path = Path(path)
    try:
        raw = path.read_text(encoding="utf-8")
        doc = json.loads(raw) if path.suffix == ".json" else yaml.safe_load(raw)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise AcceptanceError(f"cannot read acceptance profile {path}: {exc}") from exc
    return profile_from_doc(doc, str(path))


def profile_from_doc(doc, where: str) -> AcceptanceProfile:
    """A ``trtspec.acceptance/v1`` document (already parsed) as a profile; ``where`` names it in errors and in the
    source."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise AcceptanceError(f"{where}: expected an object with format {FORMAT!r}")
    return AcceptanceProfile(
        **_rates_or_curve(doc, where), source=f"{where}: {doc.get('source') or 'measured profile'}",
        drafter=doc.get("drafter"), rank_weights=tuple(doc["rank_weights"]) if doc.get("rank_weights") else None,
        per_category=doc.get("per_category") or {}, name=where,
    )


def _floats(text: str, key: str, example: str) -> tuple:
    try:
        return tuple(float(x) for x in text[len(key) + 1:].split(",") if x.strip())
    except ValueError as exc:
        raise AcceptanceError(f"--acceptance {text!r}: expected {key}=... with numbers, e.g. {example}") from exc


#: what ``--acceptance`` accepts, for error messages and help texts.
SPEC_FORMS = "FILE, prior:NAME, rates=a1,a2,..., curve=AL1,AL2,... (AL at D=1,2,...) or al=A@D"


def parse_acceptance(spec) -> AcceptanceProfile:
    """Turn an ``--acceptance`` value (see module docstring) into a profile; raises ``AcceptanceError``."""
    if isinstance(spec, AcceptanceProfile):
        return spec
    if isinstance(spec, dict):
        return AcceptanceProfile(**_rates_or_curve(spec, "acceptance entry"), source=str(spec.get("source", "")),
                                 rank_weights=tuple(spec["rank_weights"]) if spec.get("rank_weights") else None,
                                 name=str(spec.get("name", "")))
    text = str(spec).strip()
    if text.startswith("rates="):
        rates = _floats(text, "rates", "rates=0.8,0.7,0.6")
        return AcceptanceProfile(rates=rates, source=f"given inline: {text}", name=text)
    if text.startswith("curve="):
        curve = check_curve(_floats(text, "curve", "curve=1.78,2.38,2.83"), f"--acceptance {text!r}")
        return AcceptanceProfile(curve=curve, name=text, source=f"given inline: mean AL at D=1..{len(curve)} = "
                                 f"{', '.join(f'{al:g}' for al in curve)} (no independence assumption; AL held flat "
                                 f"past D={len(curve)})")
    if text.startswith("al="):
        try:
            al_s, d_s = text[3:].split("@")
            al, d = float(al_s), int(d_s)
        except ValueError as exc:
            raise AcceptanceError(f"--acceptance {text!r}: expected al=A@D, e.g. al=2.4@3") from exc
        return AcceptanceProfile(rates=spread_al(al, d), name=text,
                                 source=f"given inline: mean AL {al} measured at D={d}, spread by the geometric rule")
    if text.startswith("prior:"):
        return load_prior(text[6:])
    if text == "measure":
        raise AcceptanceError("--acceptance measure is a `trtspec build` option (it measures the pair with the local "
                              "runtime); elsewhere measure with `trtspec bench --target DIR --draft DIR "
                              "--draft-len 16` and pass its acceptance.json")
    if Path(text).expanduser().is_file():
        return load_profile_file(Path(text).expanduser())
    raise AcceptanceError(f"--acceptance {text!r}: expected {SPEC_FORMS}")
