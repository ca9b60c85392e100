"""Why the intervals fail on garment (issue 31): one resample at epsilon 1, compared in the eigenbasis of the
noise-free M (unit domain). Prints the noise-free and released eigenvalues, the floor, the truth's components along
each eigenvector, the interval of every coefficient and whether it misses, and vfl's unreliable flags. ~10 s.

    python benchmarks/inference_diagnose.py        # reads ../shared/data/garments_worker_productivity.csv
"""
# ruff: noqa
import sys, warnings, numpy as np
sys.path.insert(0, "benchmarks")
from vfl.data.datasets import garment, forest_fires, public_bounds
from vfl.models.estimators import LinearRegression
from vfl.models.inference import affine_map
data = garment("../shared/data/garments_worker_productivity.csv")
bounds = public_bounds(data.name, dataset=data)
names = data.feature_names
lo, hi = (np.array([bounds[f][k] for f in names]) for k in (0, 1))
X = np.clip(data.X, lo, hi); y = np.clip(data.y, *bounds[data.target_name])
Z = np.column_stack([X, np.ones(len(X))]); target = np.linalg.lstsq(Z, y, rcond=None)[0]
def fit(eps, rows, seed):
    est = LinearRegression(epsilon=eps, delta=1e-5, bounds=[bounds[f] for f in names], y_bounds=bounds[data.target_name], release_beta=True, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore"); est.fit(X[rows], y[rows])
    return est
pop = fit(1e9, np.arange(len(y)), 1)
d = pop.objective_.M.shape[0]
A, b = affine_map(pop._original_units, d)
th = np.linalg.solve(A, target - b)            # truth, unit domain
Mt = pop.objective_.M
st, Qt = np.linalg.eigh(Mt)
print("d", d, "A shape", A.shape)
est = fit(1.0, np.random.default_rng(5).integers(0, len(y), len(y)), 77)
mech, floor, *_ = est._release_
print("floor", floor)
sr, Qr = np.linalg.eigh(est.objective_.M)
print("true eigs ", np.round(st, 5)); print("released eigs", np.round(sr, 4))
print("true theta components per true eigvec", np.round(Qt.T @ th, 3))
inf = est._inference()
print("%-24s %9s %9s %9s %9s %9s %7s" % ("name", "truth", "coef", "center", "bse", "lo", "hi"))
for i, n in enumerate(inf.names):
    print("%-24s %9.4g %9.4g %9.4g %9.4g %9.4g %9.4g %s" % (n, target[i] if i < len(target) else np.nan, inf.coef[i], inf.center[i], inf.bse[i], *inf.conf_int_[i], "MISS" if not inf.conf_int_[i,0] <= target[i] <= inf.conf_int_[i,1] else ""))
# which true-eigen directions matter: contribution of each true eigdir to each coefficient, truth vs floor solve
w_f = -0.5 * (Qr / np.maximum(sr, floor)) @ Qr.T @ est.objective_.alpha
print("unit truth vs floor solve in TRUE eigenbasis:\n", np.round(np.c_[st, Qt.T @ th, Qt.T @ w_f, Qt.T @ (est.coef_unit_ if hasattr(est,'coef_unit_') else w_f)], 4))
print("flags", [n for n, f in zip(inf.names, inf.unreliable) if f], "unresolved", inf.unresolved_directions)
miss = [n for i, n in enumerate(inf.names) if not inf.conf_int_[i,0] <= target[i] <= inf.conf_int_[i,1]]
print("missed", miss)
print("bias bound / bse", np.round(inf.bias_bound / inf.bse, 2))
