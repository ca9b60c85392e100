"""The functional-mechanism objective and its domain (layer: core, lowest part).

* :mod:`vfl.fm.objective` – the FM objective polynomials (β, α, M), linear exactly, logistic by its order-2 Taylor form.
* :mod:`vfl.fm.domain` – public bounds, the unit map, per-party row-norm radii, the intercept column.
* :mod:`vfl.fm.dissection` – single-party and cross-party coefficient blocks of the objective.
* :mod:`vfl.fm.solver` – PSD projection with a public floor and the closed-form minimiser.

Nothing here draws noise or touches a socket.
"""
