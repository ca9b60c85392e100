"""The public parameters of one run, checked before anyone registers: :class:`RunSettings`.

Built by :func:`vfl.fit` and ``vfl coordinator`` (keyword arguments only) and run by
:class:`vfl.net.coordinator.Coordinator`; every field travels to the parties in the PLAN.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any

from vfl.exceptions import ConfigurationError
from vfl.fm.dissection import DissectionPlan
from vfl.fm.solver import REGULARIZATIONS
from vfl.models.bcd import ABORT_RULES, NOISE_CALIBRATIONS
from vfl.privacy.calibration import validate_delta, validate_epsilon
from vfl.privacy.mechanisms import DEFAULT_DOMAIN, GAUSSIAN_CALIBRATIONS, SYM_LAYOUTS, make_mechanism
from vfl.privacy.mechanisms import MECHANISMS as FM_MECHANISMS
from vfl.privacy.sensitivity import LAPLACE_VARIANTS
from vfl.secure.fastmath import RANDOMNESS_MODES

__all__ = ["RunSettings", "FM_MECHANISMS", "BCD_MECHANISMS", "MECHANISMS", "MODELS", "BCD_OPTIONS",
           "ABORT_RULES", "NOISE_CALIBRATIONS", "GAUSSIAN_CALIBRATIONS", "SYM_LAYOUTS", "LAPLACE_VARIANTS",
           "RANDOMNESS_MODES", "REGULARIZATIONS"]

# The registries of a run's names, each defined once where its concept lives and collected here for the roles and
# the faces (vfl.cli's choices): FM mechanisms (vfl.privacy.mechanisms) and their options (calibration, sym,
# fm_sensitivity: vfl.privacy.sensitivity), the FM solve's regularisations (vfl.fm.solver), the (DP-)BCD mechanisms
# and options (vfl.models.bcd), and the Paillier encryption randomness modes (vfl.secure.fastmath).
BCD_MECHANISMS = ("bcd", "dp-bcd")
MECHANISMS = FM_MECHANISMS + BCD_MECHANISMS
MODELS = ("linear", "logistic")
BCD_OPTIONS = ("abort_rule", "noise_calibration")
RUN_MIN_KEY_BITS = 512     # test keys only (below 2048 needs allow_insecure_keys)
RUN_MAX_KEY_BITS = 8192    # generating larger Paillier keys takes minutes to hours at every key holder


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

    def validate(self) -> None:
        """Check every public parameter before anyone registers (so a typo never wastes the parties' time).

        FM parameters are checked by building the mechanism on a one-feature dummy plan: the same
        constructor the parties run after the PLAN, so epsilon/delta, calibration (``classical`` needs
        eps < 1), ``sym``, ``fm_sensitivity`` and the domain fail here with the same message.
        """
        if isinstance(self.n_parties, bool) or not isinstance(self.n_parties, int) or not 1 <= self.n_parties <= 1000:
            raise ConfigurationError(f"--parties must be an integer in [1, 1000], got {self.n_parties}")
        if self.model not in MODELS:
            raise ConfigurationError(f"model must be linear or logistic, got {self.model!r}")
        if self.mechanism not in MECHANISMS:
            raise ConfigurationError(f"unknown mechanism {self.mechanism!r}; choose one of {', '.join(MECHANISMS)}")
        if self.mechanism in BCD_MECHANISMS and self.model != "linear":
            raise ConfigurationError("bcd and dp-bcd train linear regression only")
        if self.key_bits < 2048 and not self.allow_insecure_keys:
            raise ConfigurationError(f"{self.key_bits}-bit keys are insecure; use >= 2048")
        if isinstance(self.key_bits, bool) or not isinstance(self.key_bits, int) or not (
                RUN_MIN_KEY_BITS <= self.key_bits <= RUN_MAX_KEY_BITS):
            raise ConfigurationError(f"--key-bits must be an integer in [{RUN_MIN_KEY_BITS}, {RUN_MAX_KEY_BITS}] "
                                     f"(2048 is the secure default), got {self.key_bits}")
        if self.randomness not in RANDOMNESS_MODES:
            raise ConfigurationError(f"randomness must be 'short-exponent' or 'standard', got {self.randomness!r}")
        if isinstance(self.min_rows, bool) or not isinstance(self.min_rows, int) or self.min_rows < 1:
            raise ConfigurationError(f"--min-rows must be an integer >= 1, got {self.min_rows}")
        if not (self.timeout > 0 and math.isfinite(self.timeout)):
            raise ConfigurationError(f"timeout must be a positive number of seconds, got {self.timeout}")
        if self.max_run_seconds is not None and not (self.max_run_seconds > 0 and math.isfinite(self.max_run_seconds)):
            raise ConfigurationError(f"max run time must be a positive number of seconds, got {self.max_run_seconds}")
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
        if self.precision_bits is not None and (isinstance(self.precision_bits, bool)
                                                or not isinstance(self.precision_bits, int)
                                                or not 1 <= self.precision_bits <= 52):
            raise ConfigurationError(f"--precision-bits must be an integer in [1, 52], got {self.precision_bits}")
        if self.lambda_floor is not None and not (math.isfinite(self.lambda_floor) and self.lambda_floor >= 0):
            raise ConfigurationError(f"lambda_floor must be a finite number >= 0, got {self.lambda_floor}")
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
        if isinstance(self.rounds, bool) or not isinstance(self.rounds, int) or self.rounds < 1:
            raise ConfigurationError(f"--rounds must be an integer >= 1, got {self.rounds}")
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

    @property
    def beta_released(self) -> bool:
        """Whether the plan releases beta = (1/N) y'y: asked for (``release_beta``), or ``calibration="paper"``
        Gaussian FM on a linear model, which releases it as the in-process estimators do (Tasnim et al. Alg. 3)."""
        paper = self.mechanism == "gaussian-fm" and self.mechanism_options.get("calibration") == "paper"
        return self.model == "linear" and self.mechanism not in BCD_MECHANISMS and (self.release_beta or paper)

    @property
    def domain(self) -> str:
        return self.mechanism_options.get("domain") or DEFAULT_DOMAIN.get(self.mechanism, "linf")
