"""Learning algorithms built on the FM objective and the privacy layer (layer: core, top part).

* :mod:`vfl.models.estimators` – scikit-learn style centralized ``LinearRegression`` / ``LogisticRegression``.
* :mod:`vfl.models.baselines` – noisy gradient descent and objective perturbation.
* :mod:`vfl.models.bcd` – BCD and DP-BCD numeric core.
* :mod:`vfl.models.capefm` – capeFM for sites with disjoint rows.
* :mod:`vfl.models.cape_pca`, :mod:`vfl.models.cape_djica` – capePCA and capeDJICA (decentralized private joint ICA),
  with :mod:`vfl.models.cape_noise` (per-site noise modes) and :mod:`vfl.models.ica_metrics` (Amari index).
"""
