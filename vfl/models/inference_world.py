"""The bootstrap world's second moments from a noisy release, and the whole estimator applied to every replicate.

Numeric core of :mod:`vfl.models.inference` (no I/O): post-processing of the released second moments M^ and the public
noise law, so it costs no epsilon.

* :func:`denoised_second_moments`: the deflated world M_0 (each eigenvalue lowered by the noise's spread);
* :func:`matched_second_moments`: the spectrum-matched world M_0 (the eigenvalues whose noisy spectrum reproduces the
  released one in expectation).
* :func:`replicate_estimates`: the de-biased estimate theta~ = S^-1 w_floor recomputed on every bootstrap replicate
  with the replicate's own estimated world and shrinkage map S*_b, so that the bootstrap distribution carries the
  variability and the bias of estimating S from the noisy release (the bootstrap principle: resample the whole
  estimator, Efron & Tibshirani, *An Introduction to the Bootstrap*, 1993, ch. 10 and 13; Ferrando, Wang & Sheldon,
  AISTATS 2022, apply the full private estimator to every parametric replicate).
"""

from __future__ import annotations

import numpy as np

__all__ = ["MATCHED_LOWER", "denoised_second_moments", "matched_second_moments", "replicate_estimates",
           "floored_inverse"]

#: the matched world's eigenvalues are floored at this fraction of the solver's floor (below the floor the release
#: does not identify them; fixed on the screen of docs/inference.md, then confirmed on disjoint seeds)
MATCHED_LOWER = 0.5


def _sym(M: np.ndarray) -> np.ndarray:
    return (M + np.swapaxes(M, -1, -2)) / 2.0


def floored_inverse(s: np.ndarray, lambda_floor: float) -> np.ndarray:
    """1 / max(s, floor) on a stack of spectra ``s`` (..., d); floor 0: the pseudo-inverse's reciprocals (eigenvalues
    below a relative tolerance get 0), as :func:`vfl.models.inference.batch_solve`."""
    if lambda_floor > 0.0:
        return 1.0 / np.maximum(s, lambda_floor)
    tol = np.maximum(s.max(axis=-1, keepdims=True), 0.0) * s.shape[-1] * np.finfo(float).eps * 10
    return np.where(s > tol, 1.0 / np.where(s > tol, s, 1.0), 0.0)


def _match(s: np.ndarray, noise_q: np.ndarray, lam: np.ndarray, lower: float, iterations: int) -> np.ndarray:
    """The damped fixed point l <- l + (s - mean_k eig(diag(l) + N_k)) / 2, kept sorted and >= lower, batched over
    the leading axes of ``s`` (..., d) with noise ``noise_q`` (..., K, d, d) in each spectrum's eigenbasis."""
    d = s.shape[-1]
    eye = np.eye(d)
    for _ in range(iterations):
        expected = np.linalg.eigvalsh(noise_q + lam[..., None, :, None] * eye).mean(axis=-2)
        lam = np.sort(np.maximum(lam + 0.5 * (s - expected), lower), axis=-1)
    return lam


def denoised_second_moments(M: np.ndarray, noise: np.ndarray, floor: float = 0.0) -> np.ndarray:
    """M_0: the eigenvectors of the released M, its eigenvalues s deflated to sqrt(max(s^2 - v, 0)) and floored at
    ``floor``, where v = E||E e||^2 = tr E[E^2]/d is the spread the zero-mean noise E adds to the spectrum
    (E[(M + E)^2] = M^2 + E[E^2]); v from the public noise law, here the mean over the bootstrap's own draws
    ``noise`` (B, d, d)."""
    M = (M + M.T) / 2.0
    if not np.any(noise):
        return M
    spread = float(np.einsum("nij,nij->", noise, noise)) / (len(noise) * M.shape[0])
    s, Q = np.linalg.eigh(M)
    return (Q * np.maximum(np.sqrt(np.maximum(s * s - spread, 0.0)) * np.sign(s), floor)) @ Q.T


def matched_second_moments(M: np.ndarray, noise: np.ndarray, lower: float, *, draws: int = 64,
                           iterations: int = 40) -> np.ndarray:
    """M_0 with the eigenvectors Q of the released M and the eigenvalues l whose noisy spectrum matches the released
    one: l solves E[eig(diag(l) + Q'EQ)] = s (s the released eigenvalues, both sorted; E the public noise law, here
    ``draws`` of the bootstrap's own draws ``noise``), by the damped fixed point l <- l + (s - mean eig(diag(l) +
    Q'E_k Q)) / 2, kept sorted and >= ``lower``. This inverts the map from population to expected noisy eigenvalues
    (the idea of QuEST, Ledoit & Wolf, "Spectrum estimation: a unified framework for covariance matrix estimation
    and PCA in large dimensions", J. Multivariate Analysis 2015, here for additive noise by simulation): it undoes
    the noise's spread of the spectrum in both directions -- the small eigenvalues pushed down (down to ``lower``)
    and the large ones pushed up -- where :func:`denoised_second_moments` only lowers each
    eigenvalue."""
    M = _sym(M)
    if not np.any(noise):
        return M
    s, Q = np.linalg.eigh(M)
    noise_q = np.einsum("ji,njk,kl->nil", Q, noise[:draws], Q)
    lam = _match(s, noise_q, np.maximum(s, lower), lower, iterations)
    return (Q * lam) @ Q.T


def replicate_estimates(alpha: np.ndarray, M: np.ndarray, noise: np.ndarray, *, lambda_floor: float, lower: float,
                        world: tuple[np.ndarray, np.ndarray], draws: int = 16, iterations: int = 6) -> np.ndarray:
    """The de-biased estimate theta~*_b = S*_b^-1 w*_b of every replicate (alpha (B, d), M (B, d, d)), each from its
    own data only, as the real estimate is from the release:

    1. w*_b = -(1/2) (M*_b)_+^-1 alpha*_b, the floor solve;
    2. its world M_0*_b: the eigenvectors Q_b of M*_b and the eigenvalues l_b matching its spectrum s_b under the
       noise law (:func:`matched_second_moments`'s fixed point), warm-started from the main world's eigenvalues
       shifted by the replicate's change of spectrum, l_b = max(l_0 + s_b - s, lower) (``world`` = (s, l_0), the
       released and the main world's sorted eigenvalues), then ``iterations`` steps on ``draws`` common draws of
       ``noise`` (B', d, d) (common random numbers: the Monte Carlo error is the same for every replicate);
    3. S*_b = -2 mean_k R(M_0*_b + E_k) M_0*_b over the same draws (R = -(1/2) (.)_+^-1 the floor solve's map,
       so S*_b = mean_k (M_0*_b + E_k)_+^-1 M_0*_b), in Q_b's basis;
    4. theta~*_b = S*_b^+ w*_b.

    The bootstrap principle: the replicates must go through the whole estimator, including every quantity the
    estimate itself estimates from the data (here S, through M_0), else the bootstrap distribution misses that
    quantity's variability (Efron & Tibshirani, *An Introduction to the Bootstrap*, 1993, ch. 6 and 10; Ferrando,
    Wang & Sheldon, "Parametric Bootstrap for Differentially Private Confidence Intervals", AISTATS 2022, run the
    full private estimator on every parametric replicate). :func:`vfl.models.inference.release_inference` centres
    the theta~*_b on their mean (their spread and shape, not a second bias correction: docs/inference.md).

    A noise-free release (``noise`` all 0): M_0*_b = M*_b and S*_b = -2 R(M*_b) M*_b (the identity where every
    eigenvalue is above the floor). Cost at d = 11, B = 300: about B x draws x (iterations + 1) eigendecompositions."""
    M = _sym(M)
    s, Q = np.linalg.eigh(M)
    inv = floored_inverse(s, lambda_floor)
    w_q = -0.5 * inv * np.einsum("bji,bj->bi", Q, alpha)            # Q_b' w*_b
    if not np.any(noise):
        T = inv * s                                                   # S*_b in its eigenbasis (diagonal)
        x = np.divide(w_q, T, out=np.zeros_like(w_q), where=np.abs(T) > 1e-12)
        return np.einsum("bij,bj->bi", Q, x)
    released, lam0 = world
    noise_q = np.einsum("bji,kjl,blm->bkim", Q, _sym(noise[:draws]), Q, optimize=True)
    lam = _match(s, noise_q, np.sort(np.maximum(lam0 + s - released, lower), axis=-1), lower, iterations)
    d = s.shape[-1]
    s_k, V = np.linalg.eigh(noise_q + lam[:, None, :, None] * np.eye(d))
    R = np.einsum("bkij,bkj,bklj->bil", V, floored_inverse(s_k, lambda_floor), V) / noise_q.shape[1]
    T = R * lam[:, None, :]                                           # S*_b = mean_k (.)_+^-1 M_0*_b, Q_b basis
    x = np.einsum("bij,bj->bi", np.linalg.pinv(T), w_q)
    return np.einsum("bij,bj->bi", Q, x)
