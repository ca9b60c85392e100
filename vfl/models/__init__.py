"""Learning algorithms built on the FM objective and the privacy layer (layer: core, top part).

* :mod:`vfl.models.estimators` – scikit-learn style centralized ``LinearRegression`` / ``LogisticRegression``.
* :mod:`vfl.models.baselines` – noisy gradient descent and objective perturbation.
* :mod:`vfl.models.bcd` – BCD and DP-BCD numeric core.
* :mod:`vfl.models.capefm` – capeFM for sites with disjoint rows.
"""
