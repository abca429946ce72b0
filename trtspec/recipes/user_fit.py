"""Fitting a deployment's engine figures to its own measured points, regularised toward the corpus fit.

The parameter vector is the engine profile (``trtspec.recipes.engines.EngineProfile``) of the deployment's engine:
every prediction goes through the planner's own step prices (``trtspec.recipes.fidelity.steps``, the same
``_Evaluator`` that ``trtspec plan`` runs) with a profile whose figures are replaced, so a change of the cost model
changes the fit with it. Fitted (``parameter_specs``), each where the points can inform it:

* ``kernel_scale`` -- a factor on every kernel-priced part of a step (the deployment's kernels against the measured
  tables: other engine versions, clocks, power caps);
* ``step_us`` -- the fixed cost of every target forward;
* the speculative step's fixed costs that the corpus fit uses (``spec_step_us`` / ``spec_layer_us`` /
  ``spec_request_us``, those with a non-zero corpus value), the drafter's fixed cost (``draft_forward_us``, or
  ``lookup_us`` for host-side drafters) and ``verify_split`` -- only when some point speculates (D >= 1).

Maximum a posteriori with Gaussian priors: each overhead and the kernel scale in log space around the engine
file's value (the corpus fit; 1 for the scale), ``verify_split`` in [0, 1] around its file value, widths
``FitSettings``; each measured figure (tokens/s, or a speedup) has a log-normal error of ``noise_sd``. Solved with
``scipy.optimize.least_squares`` on the stacked, whitened residuals (data and prior); the parameters' standard
deviations come from the Gauss-Newton covariance ``(J^T J)^-1`` at the optimum (Laplace approximation), and each
prediction's from the same covariance. With fewer points than parameters the prior decides what the data cannot
(two points at one batch size cannot tell ``step_us`` from ``kernel_scale``).

For validation on published batch sweeps that state no AL (``benchmarks/bench_calibration.py``), ``fit(...,
free_al=True)`` also fits one AL shared by every speculative point (all at one D), bounded by [1, D+1]; a user's own
points always carry their measured AL.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass, field

from trtspec.recipes.errors import CalibrationError

SPEC_OVERHEADS = ("spec_step_us", "spec_layer_us", "spec_request_us")
LOG_BOUND = 5.0  # a log-space parameter stays within e^-5 .. e^5 of its prior


@dataclass(frozen=True)
class FitSettings:
    """Prior widths and the measurement error (log space: 0.2 = about 20%).

    ``noise_sd`` 0.03: run-to-run scatter of serving benchmarks (published repeats agree within a few percent);
    ``kernel_scale_sd`` 0.4: the spread of the corpus fit's log error on the published no-speculation tok/s (90
    baselines of ``recipes/measurements``, 1.4826 x MAD = 0.42 at 2026-12-02: ``fidelity.score_baselines``), how far
    a deployment's plain step may sit from the prediction; ``step_sd`` 0.5 and
    ``spec_sd`` 0.7: fixed host costs differ by engine version and scheduler settings by a factor 1.5-2 (the corpus
    fit's per-engine figures span 760-1350 us per step); ``split_sd`` 0.3: the verification rule's share, a
    fraction."""

    noise_sd: float = 0.03
    kernel_scale_sd: float = 0.4
    step_sd: float = 0.5
    spec_sd: float = 0.7
    split_sd: float = 0.3

    def __post_init__(self):
        for name in ("noise_sd", "kernel_scale_sd", "step_sd", "spec_sd", "split_sd"):
            if not getattr(self, name) > 0:
                raise CalibrationError(f"{name} must be > 0, got {getattr(self, name)!r}")


@dataclass(frozen=True)
class ParamSpec:
    """One fitted figure: its prior (engine units: microseconds, a factor, a fraction), prior width (log-space for
    ``space='log'``) and bounds for the linear ones."""

    name: str
    prior: float
    prior_sd: float
    space: str = "log"
    low: float = 0.0
    high: float = 1.0

    def value(self, theta: float) -> float:
        return self.prior * math.exp(theta) if self.space == "log" else theta

    @property
    def start(self) -> float:
        return 0.0 if self.space == "log" else self.prior

    def sd(self, theta: float, theta_sd: float) -> float:
        """The figure's standard deviation in its own units (delta method for the log-space ones)."""
        return self.value(theta) * theta_sd if self.space == "log" else theta_sd


@dataclass(frozen=True)
class Observation:
    """One measured figure: ``case`` a ``trtspec.recipes.fidelity.CaseSetup`` (the request at one batch, drafter,
    D, nodes, width and AL), ``figure`` ``tokens_per_s`` (aggregate: B * AL / step) or ``speedup`` (AL * step(D=0)
    / step), ``value`` what was measured."""

    case: object
    figure: str
    value: float
    label: str = ""

    def __post_init__(self):
        if self.figure not in ("tokens_per_s", "speedup") or not self.value > 0:
            raise CalibrationError(f"{self.label}: figure must be tokens_per_s or speedup with a value > 0")


def predict(obs: Observation, pricer) -> float:
    """The planner's figure for ``obs`` priced by ``pricer`` (a ``trtspec.recipes.pricing.Pricer``)."""
    from trtspec.recipes.fidelity import steps

    s0, sd = steps(obs.case, pricer)
    c = obs.case
    return c.case.batch * c.al / sd if obs.figure == "tokens_per_s" else c.al * s0 / sd


def parameter_specs(prior, drafter_class: str, speculates: bool, settings: FitSettings) -> list:
    """What the points can inform (module docstring), with the priors of ``prior`` (an ``EngineProfile``)."""
    us = prior.params_us()
    out = [ParamSpec("kernel_scale", prior.kernel_scale, settings.kernel_scale_sd),
           ParamSpec("step_us", us["step_us"], settings.step_sd)]
    if speculates:
        out += [ParamSpec(k, us[k], settings.spec_sd) for k in SPEC_OVERHEADS if k in us]
        out.append(ParamSpec("lookup_us" if drafter_class == "lookup" else "draft_forward_us",
                             us["lookup_us" if drafter_class == "lookup" else "draft_forward_us"], settings.spec_sd))
        out.append(ParamSpec("verify_split", prior.verify_split, settings.split_sd, "linear", 0.0, 1.0))
    return [p for p in out if p.space == "linear" or p.prior > 0]


@dataclass
class FitResult:
    """``profile``: the fitted ``EngineProfile``; ``parameters``: name -> {value, sd, prior, prior_sd, space,
    fitted} for every figure of the profile; ``before`` / ``after`` / ``after_sd``: per observation, the predicted
    figure with the prior and the fitted profile and the relative sd of the latter; ``summary``: the fit's
    figures; ``al`` / ``al_before``: with ``free_al``, the fitted shared AL with the fitted figures and with the
    prior's."""

    profile: object
    parameters: dict
    before: list
    after: list
    after_sd: list
    summary: dict = field(default_factory=dict)
    al: float | None = None
    al_before: float | None = None


def _errors(pred: list, obs: list) -> list:
    return [p / o.value - 1.0 for p, o in zip(pred, obs)]


class _Problem:
    """The stacked residuals of one fit: the data's (log prediction - log measured) / noise and each parameter's
    prior; the last parameter is the shared AL when ``free_al``."""

    def __init__(self, observations, prior, specs, settings, free_al: bool):
        import numpy as np

        from trtspec.recipes.optimizer import request_pricer

        self.obs, self.prior, self.specs, self.settings = observations, prior, specs, settings
        self.bases = [request_pricer(o.case.request) for o in observations]
        if any(b is None for b in self.bases):
            raise CalibrationError("a calibration fits the perf-db pricing's engine figures; the points' requests "
                                   "have no pricer (--pricing roofline or a cost table)")
        self.measured = np.log([o.value for o in observations])
        self.max_al = None
        if free_al:
            shapes = {(o.case.draft_len, o.case.nodes, o.case.topk) for o in observations if o.case.draft_len > 0}
            if len(shapes) != 1:
                raise CalibrationError("a shared unknown AL needs every speculative point at one D and tree")
            self.max_al = float(shapes.pop()[0] + 1)

    def profile(self, theta):
        return self.prior.with_params(**{p.name: p.value(t) for p, t in zip(self.specs, theta)})

    def al(self, theta):
        return float(theta[len(self.specs)]) if self.max_al is not None else None

    def predictions(self, profile, al=None) -> list:
        from trtspec.recipes.pricing import Pricer

        out = []
        for o, b in zip(self.obs, self.bases):
            shared = al is not None and o.case.draft_len > 0
            obs = dataclasses.replace(o, case=dataclasses.replace(o.case, al=al)) if shared else o
            out.append(predict(obs, Pricer(b.gpu, profile, b.db, b.note)))
        return out

    def resid(self, theta):
        import numpy as np

        data = (np.log(self.predictions(self.profile(theta), self.al(theta))) - self.measured) / self.settings.noise_sd
        return np.concatenate([data, [(t - p.start) / p.prior_sd for p, t in zip(self.specs, theta)]])

    def start_al(self) -> float:
        """The AL that matches the data's median with the prior's figures (AL scales every speculative figure)."""
        pred = self.predictions(self.prior, 1.0)
        ratios = [o.value / p for o, p in zip(self.obs, pred) if o.case.draft_len > 0]
        return min(max(statistics.median(ratios), 1.0), self.max_al)

    def solve(self, al0: float | None = None):
        import numpy as np
        from scipy.optimize import least_squares

        free = self.max_al is not None
        x0 = [p.start for p in self.specs] + ([al0] if free else [])
        low = [-LOG_BOUND if p.space == "log" else p.low for p in self.specs] + [1.0] * free
        high = [LOG_BOUND if p.space == "log" else p.high for p in self.specs] + [self.max_al] * free
        scale = [p.prior_sd for p in self.specs] + [0.5] * free
        return least_squares(self.resid, np.array(x0), bounds=(np.array(low), np.array(high)),
                             x_scale=np.array(scale), diff_step=1e-4, method="trf")


def fit(observations: list, prior, drafter_class: str, settings: FitSettings = FitSettings(),
        free_al: bool = False) -> FitResult:
    """MAP fit of ``prior`` (an ``EngineProfile``) to ``observations`` (module docstring). ``free_al``: the
    speculative points' AL is unknown but shared (a published batch sweep at one D that states no AL): it is fitted
    with the figures (bounded by [1, D+1], no prior), and ``before`` uses the AL fitted with the prior's figures."""
    import numpy as np

    if not observations:
        raise CalibrationError("no measured point to fit")
    specs = parameter_specs(prior, drafter_class, any(o.case.draft_len > 0 for o in observations), settings)
    problem = _Problem(observations, prior, specs, settings, free_al)
    al_before = None
    if free_al:
        alone = _Problem(observations, prior, [], settings, True)
        al_before = float(alone.solve(alone.start_al()).x[0])
    res = problem.solve(al_before)
    cov = np.linalg.pinv(res.jac.T @ res.jac)
    theta_sd = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    profile = problem.profile(res.x)
    before, after = problem.predictions(prior, al_before), problem.predictions(profile, problem.al(res.x))
    grad = res.jac[: len(observations)] * settings.noise_sd  # d log(prediction) / d theta
    after_sd = [float(math.sqrt(max(g @ cov @ g, 0.0))) for g in grad]
    summary = _summary(observations, specs, before, after, res, settings)
    if free_al:
        summary["shared_al"] = {"before": _round(al_before), "after": _round(problem.al(res.x)),
                                "sd": _round(float(theta_sd[-1]))}
    return FitResult(profile, _parameters(prior, profile, specs, res.x, theta_sd), before, after, after_sd, summary,
                     problem.al(res.x), al_before)


def _parameters(prior, profile, specs, theta, theta_sd) -> dict:
    from trtspec.recipes.engines import SCALE, SPLIT

    fitted = {p.name: (p, t, s) for p, t, s in zip(specs, theta, theta_sd)}
    values = {**profile.params_us(), SPLIT: profile.verify_split, SCALE: profile.kernel_scale}
    priors = {**prior.params_us(), SPLIT: prior.verify_split, SCALE: prior.kernel_scale}
    out = {}
    for name in (SCALE, *profile.params_us(), SPLIT):
        if name in fitted:
            p, t, s = fitted[name]
            out[name] = {"value": _round(values[name]), "sd": _round(p.sd(t, s)), "prior": _round(priors[name]),
                         "prior_sd": p.prior_sd, "space": p.space, "fitted": True}
        else:
            out[name] = {"value": _round(values[name]), "sd": 0.0, "prior": _round(priors[name]), "prior_sd": None,
                         "space": None, "fitted": False}
    return out


def _round(x: float) -> float:
    return float(f"{x:.6g}")


def _summary(observations, specs, before, after, res, settings) -> dict:
    eb, ea = _errors(before, observations), _errors(after, observations)

    def rms(e):
        return math.sqrt(sum(math.log1p(x) ** 2 for x in e) / len(e))

    return {"points": len(observations), "fitted": [p.name for p in specs], "noise_sd": settings.noise_sd,
            "median_abs_error_before": _round(statistics.median(abs(x) for x in eb)),
            "median_abs_error_after": _round(statistics.median(abs(x) for x in ea)),
            "max_abs_error_after": _round(max(abs(x) for x in ea)),
            "rms_log_error_before": _round(rms(eb)), "rms_log_error_after": _round(rms(ea)),
            "converged": bool(res.success), "evaluations": int(res.nfev), "message": str(res.message)}


# ---- a deployment's points ------------------------------------------------------------------------------------------

def observations(deployment) -> list:
    """One ``Observation`` per measured point of a ``trtspec.recipes.user_calibration.Deployment``."""
    from trtspec.recipes.acceptance import AcceptanceProfile
    from trtspec.recipes.fidelity import CaseSetup
    from trtspec.recipes.optimizer import PlanRequest

    s = deployment.setup
    arch, gpu, spec = s.resolve()
    dummy = AcceptanceProfile(rates=(0.5,), source="calibration: each point's measured AL is used directly")
    out = []
    for p in deployment.points:
        req = PlanRequest(model=arch, gpu=gpu, drafters=(spec,), acceptance={spec.kind: dummy}, tp=s.tp, ep=s.ep,
                          quant=s.quant, batches=(p.batch,), context=s.context if p.context is None else p.context,
                          max_draft_len=max(16, p.draft_len), engine=s.engine)
        nodes = p.tree_nodes + 1 if p.tree_nodes else p.draft_len + 1
        case = CaseSetup(p, req, spec, p.draft_len, nodes, (p.topk or 1) if p.tree_nodes else 1, p.al)
        out.append(Observation(case, p.figure, p.value, p.where))
    return out


def calibrate(deployment, settings: FitSettings = FitSettings()):
    """Fit ``deployment`` (its setup's engine file as the prior) into a ``DeploymentCalibration`` (unsaved)."""
    from trtspec import __version__
    from trtspec.recipes.engines import load_engine
    from trtspec.recipes.recipe import now_utc
    from trtspec.recipes.user_calibration import DeploymentCalibration

    obs = observations(deployment)
    prior = load_engine(deployment.setup.engine)
    result = fit(obs, prior, obs[0].case.drafter.drafter_class, settings)
    points = []
    for o, b, a, sd in zip(obs, result.before, result.after, result.after_sd):
        points.append({**o.case.case.to_dict(), "predicted_before": _round(b), "predicted_after": _round(a),
                       "predicted_after_rel_sd": _round(sd), "error_before": _round(b / o.value - 1.0),
                       "error_after": _round(a / o.value - 1.0), "where": o.label})
    from trtspec.recipes.optimizer import request_pricer

    kernels = request_pricer(obs[0].case.request).label  # the kernel tables kernel_scale is relative to
    summary = {**result.summary, "prior": f"recipes/engines/{prior.name}.yaml (the corpus fit)", "kernels": kernels}
    return DeploymentCalibration(deployment.setup, result.parameters, points, summary, list(deployment.inputs),
                                 now_utc(), f"trtspec {__version__} calibrate")
