"""vfl: differentially private regression on vertically partitioned data.

Layers, bottom to top (docs/architecture.md): :mod:`vfl.data`, :mod:`vfl.secure` (Paillier products, discrete
noise, secure aggregation), :mod:`vfl.fm` (objective, domain, dissection, solver), :mod:`vfl.privacy` (mechanisms,
calibration, accounting), :mod:`vfl.models` (estimators, baselines, BCD, capeFM), :mod:`vfl.protocols` (socket-free
protocol phases), :mod:`vfl.net` (wire, transport, roles), and the faces :mod:`vfl.api` and :mod:`vfl.cli`.
"""

from __future__ import annotations

from vfl.exceptions import (
    DataBoundsWarning,
    DataValidationError,
    DegenerateNoisyObjective,
    PrivacyLeakWarning,
    PrivacyParameterError,
    VFLError,
)
from vfl.lazy import lazy_names

__version__ = "0.1.0"

#: public name -> the module that defines it. Imported on first use (module ``__getattr__``, PEP 562), so
#: ``import vfl`` and the ``vfl`` command start without numpy/scipy/Paillier/ZeroMQ until a name needs them
#: (issue 21: ``vfl --help`` used to import the whole stack).
_LAZY = {
    "DissectionPlan": "vfl.fm.dissection",
    "QuadraticObjective": "vfl.fm.objective",
    "NoisyGradientDescent": "vfl.models.baselines",
    "ObjectivePerturbation": "vfl.models.baselines",
    "CapeDJICA": "vfl.models.cape_djica",
    "CapePCA": "vfl.models.cape_pca",
    "CapeFM": "vfl.models.capefm",
    "LinearRegression": "vfl.models.estimators",
    "LogisticRegression": "vfl.models.estimators",
    "PrivacyReport": "vfl.privacy.accounting",
    "BudgetAccountant": "vfl.privacy.budget",
    "make_mechanism": "vfl.privacy.mechanisms",
    # networked API (issues 4, 10, 11)
    "Party": "vfl.api",
    "Site": "vfl.api",
    "fit": "vfl.api",
    "fit_sites": "vfl.api",
    "fit_ica_sites": "vfl.api",
    "score": "vfl.api_scoring",   # federated scoring (issue 22)
    "Coordinator": "vfl.net.coordinator",
    "RunSettings": "vfl.net.coordinator",
    "FittedModel": "vfl.models.modelio",
    "load_model": "vfl.api_scoring",   # checks the parties' signatures (issue 29)
    "LocalData": "vfl.protocols.local_data",
    "PartyNode": "vfl.net.party",
    "plan_epsilon": "vfl.models.planner",   # the epsilon planner (issue 31)
}

__all__ = [
    "DataBoundsWarning",
    "DataValidationError",
    "DegenerateNoisyObjective",
    "PrivacyLeakWarning",
    "PrivacyParameterError",
    "VFLError",
    "__version__",
    *_LAZY,
]


# ``vfl.X`` for a name of _LAZY: imported from its module on first use and cached here (vfl.lazy)
__getattr__, __dir__ = lazy_names('vfl', globals(), _LAZY)
