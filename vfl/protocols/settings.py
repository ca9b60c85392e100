"""The public parameters of one run, checked before anyone registers: :class:`RunSettings`.

Built by :func:`vfl.fit` and ``vfl coordinator`` (keyword arguments only) and run by
:class:`vfl.net.coordinator.Coordinator`; every field travels to the parties in the PLAN.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from numbers import Real
from typing import Any, ClassVar

from vfl.exceptions import ConfigurationError
from vfl.fm.dissection import DissectionPlan
from vfl.fm.solver import REGULARIZATIONS
from vfl.models.bcd import ABORT_RULES, BCD_MECHANISMS, NOISE_CALIBRATIONS
from vfl.privacy.calibration import validate_delta, validate_epsilon
from vfl.privacy.gradient_release import GD_MECHANISMS, GD_OPTIONS
from vfl.privacy.mechanisms import DEFAULT_DOMAIN, GAUSSIAN_CALIBRATIONS, SYM_LAYOUTS, make_mechanism
from vfl.privacy.mechanisms import MECHANISMS as FM_MECHANISMS
from vfl.privacy.sensitivity import LAPLACE_VARIANTS
from vfl.secure.fastmath import RANDOMNESS_MODES
from vfl.validation import Constraint, Interval, check_params

__all__ = ["RunSettings", "CapeSettings", "CapeICASettings", "RUN_LIMITS", "RUN_LIMIT_NAMES",
           "FM_MECHANISMS", "BCD_MECHANISMS", "GD_MECHANISMS", "MECHANISMS", "MODELS", "BCD_OPTIONS",
           "ABORT_RULES", "NOISE_CALIBRATIONS", "GAUSSIAN_CALIBRATIONS", "SYM_LAYOUTS", "LAPLACE_VARIANTS",
           "RANDOMNESS_MODES", "REGULARIZATIONS"]

# The registries of a run's names, each defined once where its concept lives and collected here for the roles and
# the faces (vfl.cli's choices): FM mechanisms (vfl.privacy.mechanisms) and their options (calibration, sym,
# fm_sensitivity: vfl.privacy.sensitivity), the FM solve's regularisations (vfl.fm.solver), the (DP-)BCD mechanisms
# and options (vfl.models.bcd), and the Paillier encryption randomness modes (vfl.secure.fastmath).
MECHANISMS = FM_MECHANISMS + BCD_MECHANISMS + GD_MECHANISMS
MODELS = ("linear", "logistic")
BCD_OPTIONS = ("abort_rule", "noise_calibration")
RUN_MIN_KEY_BITS = 512     # test keys only (below 2048 needs allow_insecure_keys)
RUN_MAX_KEY_BITS = 8192    # generating larger Paillier keys takes minutes to hours at every key holder

#: the limits every hub's settings share (vertical coordinator, capeFM and capeDJICA aggregators)
RUN_LIMITS: dict[str, list[Constraint]] = {
    "timeout": [Interval(Real, 0, None, closed="neither", unit="seconds")],
    "max_run_seconds": [None, Interval(Real, 0, None, closed="neither", unit="seconds")],
}
#: what a user calls each limit in a message
RUN_LIMIT_NAMES = {"timeout": "timeout", "max_run_seconds": "max run time"}


@dataclass(kw_only=True)
class RunSettings:
    """Public parameters of one run (all of them travel to the parties in the PLAN)."""

    n_parties: int
    model: str = "linear"
    mechanism: str = "gaussian-fm"
    epsilon: float | None = 1.0
    delta: float | None = 1e-5
    key_bits: int = 2048
    allow_insecure_keys: bool = False
    precision_bits: int | None = None
    timeout: float = 120.0
    mechanism_options: dict[str, Any] = field(default_factory=dict)
    lambda_floor: float | None = None
    regularization: str | None = None     # FM solve: "floor" | "adaptive"; None: the model's default (vfl.fm.solver)
    gamma: float = 1.2
    rounds: int = 5
    tol: float | None = None
    max_run_seconds: float | None = 86400.0
    fit_intercept: bool = True
    randomness: str = "short-exponent"   # Paillier encryption randomness (vfl.secure.fastmath); or "standard"
    min_rows: int = 1                    # public minimum N (after the row alignment, if any); fewer stops the run
    release_beta: bool = False           # linear FM: the label owner also releases beta = (1/N) y'y (noised)

    #: checks declared as data (vfl.validation); the option names are the CLI's
    _parameter_constraints: ClassVar[dict[str, list[Constraint]]] = {
        "n_parties": [Interval(int, 1, 1000)],
        "key_bits": [Interval(int, RUN_MIN_KEY_BITS, RUN_MAX_KEY_BITS, note="2048 is the secure default")],
        "min_rows": [Interval(int, 1, None, closed="left")],
        **RUN_LIMITS,
        "rounds": [Interval(int, 1, None, closed="left")],                     # (DP-)BCD only
        "precision_bits": [None, Interval(int, 1, 52)],                        # FM only
        "lambda_floor": [None, Interval(Real, 0, None, closed="left")],        # FM only
    }
    _option_names: ClassVar[dict[str, str]] = {"n_parties": "--parties", "key_bits": "--key-bits",
                                               "min_rows": "--min-rows", "rounds": "--rounds",
                                               "precision_bits": "--precision-bits", **RUN_LIMIT_NAMES}

    def _check(self, *fields: str) -> None:
        check_params(self, self._parameter_constraints, names=self._option_names, only=fields)

    def validate(self) -> None:
        """Check every public parameter before anyone registers (so a typo never wastes the parties' time).

        FM parameters are checked by building the mechanism on a one-feature dummy plan: the same
        constructor the parties run after the PLAN, so epsilon/delta, calibration (``classical`` needs
        eps < 1), ``sym``, ``fm_sensitivity`` and the domain fail here with the same message.
        """
        self._check("n_parties")
        if self.model not in MODELS:
            raise ConfigurationError(f"model must be linear or logistic, got {self.model!r}")
        if self.mechanism not in MECHANISMS:
            raise ConfigurationError(f"unknown mechanism {self.mechanism!r}; choose one of {', '.join(MECHANISMS)}")
        if self.mechanism in BCD_MECHANISMS and self.model != "linear":
            raise ConfigurationError("bcd and dp-bcd train linear regression only")
        self._check("key_bits")   # first: a bool or a string is named as such, not as "True-bit keys"
        if self.key_bits < 2048 and not self.allow_insecure_keys:
            raise ConfigurationError(f"{self.key_bits}-bit keys are insecure; use >= 2048")
        if self.randomness not in RANDOMNESS_MODES:
            raise ConfigurationError(f"randomness must be 'short-exponent' or 'standard', got {self.randomness!r}")
        self._check("min_rows", *RUN_LIMITS)
        if self.mechanism in ("laplace-fm", "gaussian-fm", "relaxed-fm", "dp-bcd"):
            if self.epsilon is None or not self.epsilon > 0:
                raise ConfigurationError(f"mechanism {self.mechanism} needs --epsilon > 0")
            validate_epsilon(self.epsilon)  # finite
        if self.mechanism in ("gaussian-fm", "relaxed-fm"):
            if self.delta is None or not 0 < self.delta < 1:
                raise ConfigurationError(f"mechanism {self.mechanism} needs 0 < --delta < 1")
            validate_delta(self.delta)
        if not isinstance(self.release_beta, bool):
            raise ConfigurationError(f"release_beta must be true or false, got {self.release_beta!r}")
        if self.release_beta and (self.mechanism in BCD_MECHANISMS or self.model != "linear"):
            raise ConfigurationError("--release-beta releases the linear FM objective's constant (1/N) y'y; it does "
                                     f"not apply to a {self.model} {self.mechanism} run")
        if self.mechanism in BCD_MECHANISMS:
            self._validate_bcd()
            return
        if self.mechanism in GD_MECHANISMS:
            self._validate_gd()
            return
        self._check("precision_bits", "lambda_floor")
        if self.regularization is not None and self.regularization not in REGULARIZATIONS:
            raise ConfigurationError(f"--regularization must be one of {', '.join(REGULARIZATIONS)}, "
                                     f"got {self.regularization!r}")
        if "radii" in self.mechanism_options:
            raise ConfigurationError("the runtime always uses the radii r_k = sqrt(d_k/d) its parties prepare their "
                                     "columns with; option 'radii' is for in-process experiments only")
        opts = {k: v for k, v in self.mechanism_options.items() if k != "domain"}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # calibration="paper" warns once more when the real run builds it
            make_mechanism(self.mechanism, plan=DissectionPlan([1], 0, model=self.model),  # type: ignore[arg-type]
                           n_samples=1,
                           epsilon=self.epsilon, delta=self.delta, domain=self.domain, **opts)

    def _validate_bcd(self) -> None:
        self._check("rounds")
        if self.mechanism == "dp-bcd" and not (math.isfinite(self.gamma) and self.gamma > 1):
            raise ConfigurationError(f"--gamma must be a number > 1, got {self.gamma}")
        if self.tol is not None and not (math.isfinite(self.tol) and self.tol > 0):
            raise ConfigurationError(f"--tol must be a number > 0, got {self.tol}")
        unknown = set(self.mechanism_options) - set(BCD_OPTIONS)
        if unknown:
            raise ConfigurationError(f"option(s) {sorted(unknown)} do not apply to mechanism {self.mechanism}")
        if self.mechanism_options.get("abort_rule", "paper") not in ABORT_RULES:
            raise ConfigurationError(f"abort_rule must be one of {', '.join(ABORT_RULES)}")
        if self.mechanism_options.get("noise_calibration", "half-normal") not in NOISE_CALIBRATIONS:
            raise ConfigurationError(f"noise_calibration must be one of {', '.join(NOISE_CALIBRATIONS)}")

    def _validate_gd(self) -> None:
        """noisy-gd (vfl.protocols.gd_phase): two parties, epsilon and delta, the public options of the rounds."""
        if self.n_parties != 2:
            raise ConfigurationError(f"noisy-gd runs with exactly 2 parties (one holds the label), got --parties "
                                     f"{self.n_parties}")
        self._check("precision_bits")
        unknown = set(self.mechanism_options) - set(GD_OPTIONS)
        if unknown or self.release_beta or self.lambda_floor is not None or self.regularization is not None:
            raise ConfigurationError(f"option(s) {sorted(unknown) or 'lambda_floor/regularization/release_beta'} "
                                     f"do not apply to mechanism noisy-gd (its options: {', '.join(GD_OPTIONS)})")
        if self.epsilon is None or self.delta is None:
            raise ConfigurationError("mechanism noisy-gd needs --epsilon > 0 and 0 < --delta < 1")
        self.gd_release(n_samples=1, n_features=1)   # epsilon, delta, steps, radius, learning rate: same checks

    def gd_release(self, *, n_samples: int, n_features: int) -> Any:
        """The :class:`~vfl.privacy.gradient_release.GradientRelease` of a noisy-gd run of this shape."""
        from vfl.privacy.gradient_release import DEFAULT_RADIUS, DEFAULT_STEPS, GradientRelease

        o = self.mechanism_options
        return GradientRelease(self.model, n_samples, n_features, self.epsilon, self.delta,  # type: ignore[arg-type]
                               steps=o.get("steps", DEFAULT_STEPS), radius=o.get("iterate_radius", DEFAULT_RADIUS),
                               learning_rate=o.get("learning_rate"))

    @property
    def beta_released(self) -> bool:
        """Whether the plan releases beta = (1/N) y'y: asked for (``release_beta``), or ``calibration="paper"``
        Gaussian FM on a linear model, which releases it as the in-process estimators do (Tasnim et al. Alg. 3)."""
        paper = self.mechanism == "gaussian-fm" and self.mechanism_options.get("calibration") == "paper"
        return (self.model == "linear" and self.mechanism not in BCD_MECHANISMS + GD_MECHANISMS
                and (self.release_beta or paper))

    @property
    def domain(self) -> str:
        return self.mechanism_options.get("domain") or DEFAULT_DOMAIN.get(self.mechanism, "linf")


@dataclass(kw_only=True)
class CapeSettings:
    """Public parameters of a capeFM run (they travel to the sites in the plan; vfl.net.cape_aggregator runs it)."""

    n_sites: int
    model: str = "linear"
    epsilon: float = 1.0
    delta: float = 1e-5
    n_colluders: int | None = None
    calibration: str = "analytic"
    weights: str = "rows"
    fit_intercept: bool = True
    release_constant: bool = False
    lambda_floor: float | None = None
    timeout: float = 120.0
    max_run_seconds: float | None = 86400.0
    noise: str = "full"   # test-only switch; every site must run the same mode
    registration_timeout: float | None = None  # seconds to wait for all registrations (default: timeout)

    _parameter_constraints: ClassVar[dict[str, list[Constraint]]] = {
        "n_sites": [Interval(int, 2, 1000)],
        **RUN_LIMITS,
        "lambda_floor": [None, Interval(Real, 0, None, closed="left")],
    }
    _option_names: ClassVar[dict[str, str]] = {"n_sites": "--sites", **RUN_LIMIT_NAMES}

    def validate(self) -> None:
        from vfl.protocols.cape_aggregation import NOISE_MODES

        check_params(self, self._parameter_constraints, names=self._option_names, only=("n_sites",))
        if self.noise not in NOISE_MODES:
            raise ConfigurationError(f"noise mode must be one of {', '.join(NOISE_MODES)}")
        check_params(self, self._parameter_constraints, names=self._option_names, only=(*RUN_LIMITS, "lambda_floor"))
        self.plan([1] * self.n_sites, 1)  # eps, delta, model, S_C, calibration, weights: same checks as the sites'

    def plan(self, n_rows: list[int], n_features: int) -> Any:
        """The :class:`~vfl.protocols.cape_aggregation.CapeFMPlan` of this run for the registered sites."""
        import secrets

        from vfl.protocols.cape_aggregation import CapeFMPlan

        plan = CapeFMPlan(self.model, self.epsilon, self.delta, list(n_rows), n_features, secrets.randbits(63),
                          self.n_colluders, self.calibration, self.release_constant, self.weights, self.noise)
        try:
            plan.validate()
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(str(exc)) from None
        if self.calibration == "paper" and self.epsilon >= 1.0:
            raise ConfigurationError(f"calibration='paper' uses the classical Gaussian formula, proven only for "
                                     f"epsilon < 1 (got {self.epsilon})")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the paper-mode warning is given once, by the real run
            plan.calibration_values()
        return plan


@dataclass(kw_only=True)
class CapeICASettings:
    """A capeDJICA run: S sites, the public pipeline :class:`~vfl.models.cape_ica.CapeICAConfig` and the runtime
    limits (vfl.net.cape_ica_aggregator runs it)."""

    n_sites: int
    config: Any    # vfl.models.cape_ica.CapeICAConfig
    timeout: float = 120.0
    max_run_seconds: float | None = 86400.0
    registration_timeout: float | None = None

    _parameter_constraints: ClassVar[dict[str, list[Constraint]]] = {"n_sites": [Interval(int, 2, 1000)],
                                                                     **RUN_LIMITS}
    _option_names: ClassVar[dict[str, str]] = {"n_sites": "--sites", **RUN_LIMIT_NAMES}

    def validate(self) -> None:
        from vfl.protocols.cape_djica_rounds import ICA_NOISE_MODES, CapeICAPlan

        check_params(self, self._parameter_constraints, names=self._option_names)
        if self.config.noise not in ICA_NOISE_MODES:
            raise ConfigurationError(f"networked capeDJICA runs noise {' or '.join(ICA_NOISE_MODES)}")
        self.config.validate()
        K = self.config.n_components
        CapeICAPlan(self.config.to_dict(), [1] * self.n_sites, K, 0).validate()  # S_C, K >= 2: the sites' checks
