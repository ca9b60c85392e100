"""Dissection of the FM objective into single-party and cross-party blocks (Xu, Yuan & Wu 2021, §4; spec §1.3).

K parties hold disjoint feature blocks F_0..F_{K-1} (global order: party 0's columns first); party
``label_owner`` holds y. The released coefficient vector splits into

| block       | entries                 | depends on     | kind         |
|-------------|-------------------------|----------------|--------------|
| ``beta``    | (1/N) sum y^2 (linear)  | {L}            | single-party |
| ``alpha[L]``| alpha_a, a in F_L       | {L}            | single-party |
| ``alpha[k]``| alpha_a, a in F_k, k!=L | {L, k}         | cross (y . X_k) |
| ``M[k,k]``  | vech(F_k x F_k)         | {k}            | single-party |
| ``M[k,l]``  | F_k x F_l, k < l, once  | {k, l}         | cross (X_k^T X_l) |

Each block is an affine image of a *raw* inner product: ``coef = scale * raw + offset`` where the
offset (logistic alpha: (1/(2N)) sum_i x_ia) is local to one party, so a cross block needs exactly
one secure product. Reassembling all blocks gives the centralized coefficients exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from vfl.exceptions import ConfigurationError
from vfl.fm.objective import Model, QuadraticObjective, validate_model

BlockKind = Literal["beta", "alpha", "M"]

__all__ = ["Block", "DissectionPlan"]


@dataclass(frozen=True)
class Block:
    """One released block of coefficients.

    ``parties`` are the party indices the block is *about* ((L,) for beta, (k,) for alpha[k],
    (k, l) for M[k,l]); ``depends_on`` are those whose data enter it (alpha[k] also needs y at L).
    ``noised_by`` adds the block's noise: the owner for single-party blocks, the responder of the
    secure product (the party that does *not* hold the decryption key) for cross blocks, so noise is
    inside the ciphertext before anything is decrypted (spec §1.3 [correction]).
    """

    name: str
    kind: BlockKind
    parties: tuple[int, ...]
    depends_on: frozenset[int]
    noised_by: int
    encryptor: int | None = None  # cross blocks: the key holder whose columns are encrypted
    shape: tuple[int, ...] = field(default=())

    @property
    def cross(self) -> bool:
        return len(self.depends_on) > 1

    @property
    def responder(self) -> int | None:
        return self.noised_by if self.cross else None

    @property
    def diagonal(self) -> bool:
        """A diagonal block ``M[k,k]``: symmetric, its independent entries are the upper triangle (vech; spec §0.4).
        Its noise is symmetric too (the iso / vech layouts of :func:`vfl.privacy.mechanisms.symmetric_noise`)."""
        return self.kind == "M" and self.parties[0] == self.parties[1]


class DissectionPlan:
    """The list of blocks for a given column ownership and label owner (spec §1.3)."""

    def __init__(self, feature_counts: Sequence[int], label_owner: int = 0, *, release_beta: bool = False,
                 model: Model = "linear") -> None:
        counts = [int(c) for c in feature_counts]
        if not counts:
            raise ConfigurationError("at least one party is needed")
        if any(c < 0 for c in counts) or sum(counts) == 0:
            raise ConfigurationError(f"feature counts must be >= 0 with at least one feature, got {counts}")
        if not 0 <= label_owner < len(counts):
            raise ConfigurationError(f"label owner {label_owner} is not one of the {len(counts)} parties")
        self.model: Model = validate_model(model)
        self.feature_counts = counts
        self.label_owner = int(label_owner)
        self.release_beta = bool(release_beta) and self.model == "linear"
        starts = np.concatenate([[0], np.cumsum(counts)]).astype(int)
        self.feature_slices = [slice(int(starts[k]), int(starts[k + 1])) for k in range(len(counts))]
        self.blocks: list[Block] = self._build()

    @property
    def n_parties(self) -> int:
        return len(self.feature_counts)

    @property
    def n_features(self) -> int:
        return sum(self.feature_counts)

    def _cross_roles(self, k: int, l: int, dk: int, dl: int) -> tuple[int, int]:
        """(encryptor, responder): the party with more columns encrypts (fewer homomorphic exponentiations)."""
        return (k, l) if dk >= dl else (l, k)

    def _build(self) -> list[Block]:
        L, d = self.label_owner, self.feature_counts
        blocks: list[Block] = []
        if self.release_beta:
            blocks.append(Block("beta", "beta", (L,), frozenset({L}), L, None, ()))
        for k, dk in enumerate(d):
            if dk == 0:
                continue
            if k == L:
                blocks.append(Block(f"alpha[{k}]", "alpha", (k,), frozenset({k}), k, None, (dk,)))
            else:
                enc, resp = self._cross_roles(k, L, dk, 1)
                blocks.append(Block(f"alpha[{k}]", "alpha", (k,), frozenset({L, k}), resp, enc, (dk,)))
        for k, dk in enumerate(d):
            for l in range(k, len(d)):
                dl = d[l]
                if dk == 0 or dl == 0:
                    continue
                if k == l:
                    blocks.append(Block(f"M[{k},{k}]", "M", (k, k), frozenset({k}), k, None, (dk, dk)))
                else:
                    enc, resp = self._cross_roles(k, l, dk, dl)
                    blocks.append(Block(f"M[{k},{l}]", "M", (k, l), frozenset({k, l}), resp, enc, (dk, dl)))
        return blocks

    # ------------------------------------------------------------------ views
    def block(self, name: str) -> Block:
        for b in self.blocks:
            if b.name == name:
                return b
        raise KeyError(name)

    def single_party_blocks(self, party: int) -> list[Block]:
        return [b for b in self.blocks if not b.cross and b.noised_by == party]

    def cross_blocks(self) -> list[Block]:
        return [b for b in self.blocks if b.cross]

    def blocks_of(self, party: int) -> list[Block]:
        """Blocks whose value depends on ``party``'s data."""
        return [b for b in self.blocks if party in b.depends_on]

    def index(self, block: Block) -> tuple[slice, ...]:
        """Where the block sits in alpha (1 slice) or M (2 slices)."""
        if block.kind == "alpha":
            return (self.feature_slices[block.parties[0]],)
        if block.kind == "M":
            return (self.feature_slices[block.parties[0]], self.feature_slices[block.parties[1]])
        return ()

    # ------------------------------------------------------------ affine maps
    def label_operand(self, block: Block, party: int) -> bool:
        """Whether ``party``'s operand of a cross block is the label y instead of its columns: the label owner's
        side of ``alpha[k]`` (the product X_k^T y) for k != L (spec §1.3)."""
        return block.kind == "alpha" and party == self.label_owner and block.parties[0] != party

    def scale(self, block: Block, n_samples: int) -> float:
        """``coef = scale * raw + offset`` where raw is y.y, X_k^T y or X_k^T X_l (average form)."""
        n = float(n_samples)
        if block.kind == "beta":
            return 1.0 / n
        if block.kind == "alpha":
            return -2.0 / n if self.model == "linear" else -1.0 / n
        return 1.0 / n if self.model == "linear" else 1.0 / (8.0 * n)

    def raw_statistic(self, block: Block, parts: Sequence[np.ndarray], y: np.ndarray) -> np.ndarray:
        """The raw inner product behind a block, computed in the clear (reference and single-party blocks)."""
        if block.kind == "beta":
            return np.asarray(y @ y)
        if block.kind == "alpha":
            return parts[block.parties[0]].T @ y
        k, l = block.parties
        return parts[k].T @ parts[l]

    def local_offset(self, block: Block, X_k: np.ndarray, n_samples: int) -> np.ndarray:
        """The part of a block only its party knows: (1/(2N)) sum_i x_i for logistic alpha."""
        if block.kind == "alpha" and self.model == "logistic":
            return X_k.sum(axis=0) / (2.0 * n_samples)
        return np.zeros(block.shape)

    def block_value(self, block: Block, parts: Sequence[np.ndarray], y: np.ndarray) -> np.ndarray:
        """Noise-free coefficient block (average form)."""
        n = parts[0].shape[0] if parts else y.shape[0]
        raw = self.raw_statistic(block, parts, y)
        off = self.local_offset(block, parts[block.parties[0]], n) if block.kind == "alpha" else 0.0
        return self.scale(block, n) * raw + off

    # ---------------------------------------------------------- (re)assembly
    def split(self, objective: QuadraticObjective) -> dict[str, np.ndarray]:
        """Cut centralized coefficients into blocks (M[k,l] with k < l taken once)."""
        out: dict[str, np.ndarray] = {}
        for b in self.blocks:
            if b.kind == "beta":
                out[b.name] = np.asarray(objective.beta, dtype=float)
            elif b.kind == "alpha":
                out[b.name] = objective.alpha[self.index(b)[0]].copy()
            else:
                out[b.name] = objective.M[self.index(b)].copy()
        return out

    def assemble(self, values: dict[str, np.ndarray], beta: float | None = None) -> QuadraticObjective:
        """Reassemble blocks into (beta, alpha, M); cross M blocks are mirrored so M is symmetric."""
        d = self.n_features
        alpha = np.zeros(d)
        M = np.zeros((d, d))
        missing = [b.name for b in self.blocks if b.name not in values]
        if missing:
            raise ConfigurationError(f"missing blocks: {', '.join(missing)}")
        for b in self.blocks:
            v = np.asarray(values[b.name], dtype=float)
            if v.shape != b.shape:
                raise ConfigurationError(f"block {b.name} has shape {v.shape}, expected {b.shape}")
            if b.kind == "beta":
                beta = float(v)
            elif b.kind == "alpha":
                alpha[self.index(b)[0]] = v
            else:
                rs, cs = self.index(b)
                M[rs, cs] = v
                if not b.diagonal:
                    M[cs, rs] = v.T
        if beta is None:
            beta = float(np.log(2.0)) if self.model == "logistic" else 0.0
        return QuadraticObjective(beta, alpha, M)

    def describe(self) -> list[dict]:
        """JSON-ready table of the plan: name, kind, parties, depends_on, who adds noise, who encrypts."""
        return [
            {"name": b.name, "kind": b.kind, "parties": list(b.parties), "depends_on": sorted(b.depends_on),
             "cross": b.cross, "noised_by": b.noised_by, "encryptor": b.encryptor, "shape": list(b.shape)}
            for b in self.blocks
        ]
