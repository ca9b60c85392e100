"""Exception and warning classes shared by every vfl module.

Every user-facing error derives from :class:`VFLError`, so the CLI can print one readable line
for any of them and exit non-zero without a traceback; the class attribute ``exit_code`` is that exit
code (one place maps it: :func:`vfl.cli.exit_code_for`).
"""

from __future__ import annotations


class VFLError(Exception):
    """Base class of every error vfl raises on purpose."""

    exit_code = 1   # the `vfl` command's exit code (vfl.cli.exit_code_for; docs/reliability.md)


class DataValidationError(VFLError, ValueError):
    """Input data are malformed: NaN, wrong shape, mismatched rows, labels outside their set, ..."""

    exit_code = 2   # bad data


class DataTypeError(DataValidationError, TypeError):
    """Input data hold values that are not numbers (a dict, a string, ...)."""


class NotFittedError(VFLError, ValueError, AttributeError):
    """A model was used before ``fit`` (ValueError and AttributeError, like scikit-learn's)."""


class PrivacyParameterError(VFLError, ValueError):
    """A privacy parameter is invalid (epsilon <= 0, delta outside (0, 1), classical calibration with eps >= 1)."""


class BudgetError(PrivacyParameterError):
    """A fit would spend more than its privacy budget accountant has left (:class:`vfl.BudgetAccountant`)."""

    exit_code = 2   # a policy refusal: over the privacy budget or a member's limits


class DegenerateNoisyObjective(VFLError, ArithmeticError):
    """After PSD projection the noisy quadratic objective has too few positive eigenvalues to be minimised."""


class EncodingOverflowError(VFLError, OverflowError):
    """A fixed-point value or packed slot would overflow; raised *before* anything wrong is decrypted."""


class KeyValidationError(VFLError, ValueError):
    """A Paillier key is too short, or a ciphertext is out of range or belongs to another key."""


class ProtocolError(VFLError):
    """A peer sent a malformed, oversized, out-of-order or unexpected message."""

    exit_code = 4   # a peer broke the protocol


class IdentityError(ProtocolError):
    """A signature is missing or does not verify, or a party's signing identity is not pinned (names the party)."""


class PartyFailure(VFLError):
    """A party died, timed out or reported an error; the run was aborted and no model was written."""

    exit_code = 3   # a party failed, timed out or the run was aborted


class ConfigurationError(VFLError, ValueError):
    """A CLI option, configuration file or API argument is invalid."""

    exit_code = 2   # bad option or configuration


class WorkerStalled(VFLError, RuntimeError):
    """A local pool worker made no progress for ``VFL_WORKER_STALL_SECONDS`` (names the worker and its pid)."""


class DPBCDAbort(VFLError):
    """DP-BCD's utility check ||v_out|| <= xi failed; the whole run outputs nothing (de Jong et al. 2022, Alg. 2)."""


class PrivacyLeakWarning(UserWarning):
    """Something may leak privacy: bounds taken from the data, paper-mode calibration, a fixed seed, ..."""


class DataBoundsWarning(PrivacyLeakWarning):
    """Clipping bounds were inferred from the private data instead of being declared publicly."""


class DataConversionWarning(UserWarning):
    """Input was converted (a column-vector y raveled to 1-D), as scikit-learn's warning of the same name."""


class SlowBackendWarning(RuntimeWarning):
    """gmpy2 is missing: Paillier arithmetic runs 7-12x slower."""


class NoBetterThanBaselineWarning(UserWarning):
    """A fitted model is no better (or cannot be told apart from) predicting the mean or the base rate, as estimated
    from its DP release (vfl.models.inference)."""
