"""vfl: differentially private regression on vertically partitioned data.

Numeric core (no sockets): :mod:`vfl.objective`, :mod:`vfl.dissection`, :mod:`vfl.mechanisms`,
:mod:`vfl.accounting`, :mod:`vfl.solver`, :mod:`vfl.estimators`. Secure computation: :mod:`vfl.secure`.
Networked runtime and API: :mod:`vfl.api`, :mod:`vfl.coordinator`, :mod:`vfl.party`, :mod:`vfl.cli`.
"""

from vfl.accounting import PrivacyReport
from vfl.baselines import NoisyGradientDescent, ObjectivePerturbation
from vfl.capefm import CapeFM
from vfl.dissection import DissectionPlan
from vfl.estimators import LinearRegression, LogisticRegression
from vfl.exceptions import (
    DataBoundsWarning,
    DataValidationError,
    DegenerateNoisyObjective,
    PrivacyLeakWarning,
    PrivacyParameterError,
    VFLError,
)
from vfl.mechanisms import make_mechanism
from vfl.objective import QuadraticObjective

__version__ = "0.1.0"

__all__ = [
    "CapeFM",
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

from vfl.api import Party, fit  # noqa: E402  (networked API, issue 4)
from vfl.coordinator import Coordinator, RunSettings  # noqa: E402
from vfl.modelio import FittedModel, load_model  # noqa: E402
from vfl.party import LocalData, PartyNode  # noqa: E402

__all__ += ["Coordinator", "FittedModel", "LocalData", "Party", "PartyNode", "RunSettings", "fit", "load_model"]
