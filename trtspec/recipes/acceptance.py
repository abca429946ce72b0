"""Acceptance profiles: per-position conditional acceptance rates a_k, where they come from, and E[AL].

Definitions (``design.md``): a_k = P(draft k accepted | drafts 1..k-1 accepted); AL counts the bonus token, so for a
chain of D drafts ``E[AL] = 1 + sum_{k<=D} prod_{i<=k} a_i`` (1 <= E[AL] <= D+1).

Sources, in the order ``parse_acceptance`` tries them:

* ``rates=0.8,0.7,0.6`` -- a_1..a_n given inline;
* ``al=2.4@3`` -- a mean AL measured at draft length D, spread over positions by the **geometric rule**: one
  constant rate a with ``1 + a + a^2 + ... + a^D = AL`` (solved by bisection); the measured AL is reproduced
  exactly at that D;
* ``prior:NAME`` -- ``recipes/priors/NAME.yaml``: rates derived from a published figure, with its source;
* a path to a JSON profile written by ``trtspec bench`` (format ``trtspec.acceptance/v1``).

Positions past the last given rate reuse the last rate (stated in every recipe's provenance as ``extrapolated``).
For tree drafters an optional ``rank_weights`` w_r (w_1 = 1, non-increasing) gives the Sequoia-style positional
acceptance of the rank-r sibling at depth d as ``a_d * w_r``.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from trtspec.recipes.errors import AcceptanceError
from trtspec.recipes.paths import book_dir

FORMAT = "trtspec.acceptance/v1"


@dataclass(frozen=True)
class AcceptanceProfile:
    """Conditional acceptance rates ``rates`` (a_1..a_n, each in [0, 1]) with their ``source`` (free text)."""

    rates: tuple
    source: str
    drafter: str | None = None
    rank_weights: tuple | None = None
    per_category: dict = field(default_factory=dict, compare=False)
    name: str = ""

    def __post_init__(self):
        if not self.rates:
            raise AcceptanceError("acceptance profile needs at least one rate a_1")
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
                raise AcceptanceError("rank_weights too large: a_d * sum(rank_weights) must be <= 1 (sibling "
                                      "acceptances are exclusive events)")

    def rate(self, k: int) -> float:
        """a_k for k >= 1 (positions past the profile reuse the last rate)."""
        if k < 1:
            raise AcceptanceError(f"draft position k must be >= 1, got {k}")
        return float(self.rates[min(k, len(self.rates)) - 1])

    def joint(self, k: int) -> float:
        """P(accept >= k) = prod_{i<=k} a_i."""
        p = 1.0
        for i in range(1, k + 1):
            p *= self.rate(i)
        return p

    def expected_al(self, draft_len: int) -> float:
        """E[AL] of a chain of ``draft_len`` drafts, bonus token included."""
        if draft_len < 0:
            raise AcceptanceError(f"draft_len must be >= 0, got {draft_len}")
        total, p = 1.0, 1.0
        for k in range(1, draft_len + 1):
            p *= self.rate(k)
            total += p
        return total

    def al_curve(self, max_len: int) -> list[float]:
        """[E[AL](0), ..., E[AL](max_len)] in one pass."""
        out, total, p = [1.0], 1.0, 1.0
        for k in range(1, max_len + 1):
            p *= self.rate(k)
            total += p
            out.append(total)
        return out

    def for_category(self, category: str) -> "AcceptanceProfile":
        """The profile of one workload category (``per_category[category]["rates"]``); raises if absent."""
        entry = self.per_category.get(category)
        if not isinstance(entry, dict) or not entry.get("rates"):
            raise AcceptanceError(f"acceptance {self.name or self.source!r} has no rates for category {category!r}; "
                                  f"categories: {', '.join(sorted(self.per_category)) or '(none)'}")
        return AcceptanceProfile(rates=tuple(float(a) for a in entry["rates"]), drafter=self.drafter,
                                 source=f"{self.source} [category {category}]", rank_weights=self.rank_weights,
                                 name=f"{self.name}[{category}]")

    def to_dict(self) -> dict:
        d = {"rates": [round(float(a), 6) for a in self.rates], "source": self.source}
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
    """``recipes/priors/<name>.yaml`` as a profile; each prior must carry ``source`` and ``derivation``."""
    docs = _prior_docs()
    if name not in docs:
        raise AcceptanceError(f"unknown acceptance prior {name!r}; known priors: {', '.join(prior_names()) or '(none)'}")
    path, doc = docs[name]
    for key in ("rates", "source", "derivation", "drafter"):
        if not doc.get(key):
            raise AcceptanceError(f"{path}: prior lacks '{key}'")
    return AcceptanceProfile(
        rates=tuple(float(a) for a in doc["rates"]), source=f"prior:{name} -- {doc['source']} ({doc['derivation']})",
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
    """A ``trtspec.acceptance/v1`` JSON (or YAML) profile file."""
    path = Path(path)
    try:
        raw = path.read_text(encoding="utf-8")
        doc = json.loads(raw) if path.suffix == ".json" else yaml.safe_load(raw)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise AcceptanceError(f"cannot read acceptance profile {path}: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise AcceptanceError(f"{path}: expected an object with format {FORMAT!r}")
    if not doc.get("rates"):
        raise AcceptanceError(f"{path}: 'rates' (a_1..a_D) is missing or empty")
    return AcceptanceProfile(
        rates=tuple(float(a) for a in doc["rates"]), source=f"{path}: {doc.get('source') or 'measured profile'}",
        drafter=doc.get("drafter"), rank_weights=tuple(doc["rank_weights"]) if doc.get("rank_weights") else None,
        per_category=doc.get("per_category") or {}, name=str(path),
    )


def parse_acceptance(spec) -> AcceptanceProfile:
    """Turn an ``--acceptance`` value (see module docstring) into a profile; raises ``AcceptanceError``."""
    if isinstance(spec, AcceptanceProfile):
        return spec
    if isinstance(spec, dict):
        return AcceptanceProfile(rates=tuple(spec["rates"]), source=str(spec.get("source", "")),
                                 rank_weights=tuple(spec["rank_weights"]) if spec.get("rank_weights") else None,
                                 name=str(spec.get("name", "")))
    text = str(spec).strip()
    if text.startswith("rates="):
        try:
            rates = tuple(float(x) for x in text[6:].split(",") if x.strip())
        except ValueError as exc:
            raise AcceptanceError(f"--acceptance {text!r}: expected rates=a1,a2,... with numbers in [0, 1]") from exc
        return AcceptanceProfile(rates=rates, source=f"given inline: {text}", name=text)
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
    if Path(text).expanduser().is_file():
        return load_profile_file(Path(text).expanduser())
    raise AcceptanceError(f"--acceptance {text!r}: expected FILE, prior:NAME, rates=a1,a2,... or al=A@D")
