"""vfl: differentially private regression on vertically partitioned data.

Layers, bottom to top (docs/architecture.md): :mod:`vfl.data`, :mod:`vfl.secure` (Paillier products, discrete
noise, secure aggregation), :mod:`vfl.fm` (objective, domain, dissection, solver), :mod:`vfl.privacy` (mechanisms,
calibration, accounting), :mod:`vfl.models` (estimators, baselines, BCD, capeFM), :mod:`vfl.protocols` (socket-free
protocol phases), :mod:`vfl.net` (wire, transport, roles), and the faces :mod:`vfl.api` and :mod:`vfl.cli`.
"""

from vfl.exceptions import (
    DataBoundsWarning,
    DataValidationError,
    DegenerateNoisyObjective,
    PrivacyLeakWarning,
    PrivacyParameterError,
    VFLError,
)
from vfl.fm.dissection import DissectionPlan
from vfl.fm.objective import QuadraticObjective
from vfl.models.baselines import NoisyGradientDescent, ObjectivePerturbation
from vfl.models.cape_djica import CapeDJICA
from vfl.models.cape_pca import CapePCA
from vfl.models.capefm import CapeFM
from vfl.models.estimators import LinearRegression, LogisticRegression
from vfl.privacy.accounting import PrivacyReport
from vfl.privacy.mechanisms import make_mechanism

__version__ = "0.1.0"

__all__ = [
    "CapeDJICA",
    "CapeFM",
    "CapePCA",
    "NoisyGradientDescent",
    "ObjectivePerturbation",
    "DataBoundsWarning",
    "DataValidationError",
    "DegenerateNoisyObjective",
    "DissectionPlan",
    "LinearRegression",
    "LogisticRegression",
    "PrivacyLeakWarning",
    "PrivacyParameterError",
    "PrivacyReport",
    "QuadraticObjective",
    "VFLError",
    "make_mechanism",
    "__version__",
]

from vfl.api import Party, Site, fit, fit_ica_sites, fit_sites  # noqa: E402  (networked API, issues 4, 10, 11)
from vfl.net.coordinator import Coordinator, RunSettings  # noqa: E402
from vfl.net.modelio import FittedModel, load_model  # noqa: E402
from vfl.net.party import LocalData, PartyNode  # noqa: E402

__all__ += ["Coordinator", "FittedModel", "LocalData", "Party", "PartyNode", "RunSettings", "fit", "load_model",
            "Site", "fit_sites", "fit_ica_sites"]
