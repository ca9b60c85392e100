"""A party's local policy on the PLAN a coordinator sends (issue 14, item 1): what it agrees to run.

A party used to run whatever mechanism a PLAN named: ``none`` released its un-noised blocks and ``bcd`` made the
label owner send ``y - X beta`` exactly. Now every party checks the plan against its own operator's policy
before it touches its data, and prints the plan it is about to run:

* ``allow_mechanisms``: the mechanisms it runs; by default only formally DP ones (:data:`DEFAULT_MECHANISMS`):
  ``none`` and ``bcd`` (no noise at all) and ``dp-bcd`` (noisy, but never formally DP: each co-party learns
  ``X beta`` of the others exactly, docs/dp_bcd.md) run only if listed explicitly (issue 21);
* ``min_epsilon`` / ``max_epsilon``: the *true* epsilon of the plan (the privacy report of the mechanism the
  party builds from the plan -- e.g. ``calibration="paper"`` reports its real, larger epsilon) must lie in
  this range; ``max_delta`` likewise bounds delta;
* ``max_key_bits``: a plan asking for absurd key sizes (key generation for minutes or hours) is refused;
  keys below 2048 bits are refused unless the party allows insecure test keys (checked by the party);
* shape sanity: the plan must describe the party as it registered, at most :data:`MAX_PLAN_PARTIES` parties,
  and no other party may claim more columns than the table has rows (each claimed column is a ciphertext the key
  holder would decrypt).

Who the plan's parties are is not a policy matter: after this check every party verifies the signed roster
(:mod:`vfl.protocols.roster`), so a party nobody pinned is refused, and every response a key holder decrypts is
signed end to end by the responder the plan names. The former *exposure* bound (``--max-exposed-rows``: how many
of its own rows a relay forging responses could make a key holder decrypt) is gone with that attack.

Pure functions, no sockets: :func:`check_plan` takes the PLAN body and returns a :class:`PlanSummary` or raises
:class:`~vfl.exceptions.ConfigurationError` with one line that names the policy option to change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from vfl.exceptions import ConfigurationError
from vfl.models.bcd import BCD_MECHANISMS
from vfl.privacy.gradient_release import GD_MECHANISMS
from vfl.privacy.mechanisms import MECHANISMS as FM_MECHANISMS
from vfl.validation import Interval, check_param, is_name

__all__ = ["DEFAULT_MECHANISMS", "UNPROTECTED_MECHANISMS", "NOT_FORMALLY_DP", "BOUNDED_MECHANISMS",
           "MAX_PLAN_PARTIES", "PartyPolicy", "PlanSummary", "SitePolicy", "check_plan", "check_site_plan",
           "describe_plan"]

#: no noise at all: a party runs these only when its operator lists them in ``allow_mechanisms``
UNPROTECTED_MECHANISMS = frozenset({"none", "bcd"})
#: never formally DP (no noise, or DP-BCD, whose co-parties learn X beta exactly): not allowed by default
NOT_FORMALLY_DP = UNPROTECTED_MECHANISMS | {"dp-bcd"}
#: the registries (vfl.privacy.mechanisms, vfl.models.bcd), not a copy; vfl.protocols.settings collects the same
ALL_MECHANISMS = frozenset(FM_MECHANISMS + BCD_MECHANISMS + GD_MECHANISMS)
#: formally DP against a co-party that encrypts any operand inside the plan's layout (sigma is calibrated to that
#: case), but a co-party that crafts a ciphertext beyond the per-row bound passes every check and amplifies one of
#: the other party's rows in the iterates it sees (docs/threat_model.md): a party runs noisy-gd rounds only when its
#: operator lists them in ``allow_mechanisms``
OPT_IN_MECHANISMS = frozenset(GD_MECHANISMS)
DEFAULT_MECHANISMS = ALL_MECHANISMS - NOT_FORMALLY_DP - OPT_IN_MECHANISMS
#: the mechanisms whose guarantee rests on public column and label bounds (the noisy FM releases): a party whose
#: policy allows one of them needs declared bounds, or its operator's explicit opt-in (vfl.net.party)
BOUNDED_MECHANISMS = frozenset(FM_MECHANISMS + GD_MECHANISMS) - UNPROTECTED_MECHANISMS
DEFAULT_MAX_EPSILON = 10.0
DEFAULT_MAX_DELTA = 1e-3
DEFAULT_MAX_KEY_BITS = 8192
MAX_PLAN_PARTIES = 1000       # the coordinator's own --parties limit (RunSettings); the block list grows as K^2


@dataclass(frozen=True)
class PartyPolicy:
    """What a party agrees to run; checked against every PLAN before any data is touched."""

    allow_mechanisms: frozenset[str] = DEFAULT_MECHANISMS
    min_epsilon: float | None = None
    max_epsilon: float | None = DEFAULT_MAX_EPSILON
    max_delta: float | None = DEFAULT_MAX_DELTA
    max_key_bits: int = DEFAULT_MAX_KEY_BITS

    def __post_init__(self) -> None:
        unknown = set(self.allow_mechanisms) - ALL_MECHANISMS
        if unknown:
            raise ConfigurationError(f"--allow-mechanisms: unknown mechanism(s) {', '.join(sorted(unknown))}; "
                                     f"choose from {', '.join(sorted(ALL_MECHANISMS))}")
        if not self.allow_mechanisms:
            raise ConfigurationError("--allow-mechanisms: allow at least one mechanism")
        for name, value in (("--min-epsilon", self.min_epsilon), ("--max-epsilon", self.max_epsilon)):
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ConfigurationError(f"{name} must be a finite number > 0, got {value}")
        if self.min_epsilon is not None and self.max_epsilon is not None and self.min_epsilon > self.max_epsilon:
            raise ConfigurationError(f"--min-epsilon {self.min_epsilon:g} exceeds --max-epsilon {self.max_epsilon:g}")
        if self.max_delta is not None and not 0 < self.max_delta < 1:
            raise ConfigurationError(f"--max-delta must lie in (0, 1), got {self.max_delta}")
        check_param("max_key_bits", self.max_key_bits, [Interval(int, 512, None, closed="left")])

    @classmethod
    def from_options(cls, allow_mechanisms: str | None = None, min_epsilon: float | None = None,
                     max_epsilon: float | None = DEFAULT_MAX_EPSILON,
                     max_delta: float | None = DEFAULT_MAX_DELTA) -> PartyPolicy:
        """From CLI strings: ``allow_mechanisms`` comma separated (None: :data:`DEFAULT_MECHANISMS`)."""
        allowed = DEFAULT_MECHANISMS if allow_mechanisms is None else frozenset(
            m.strip() for m in allow_mechanisms.split(",") if m.strip())
        return cls(allowed, min_epsilon, max_epsilon, max_delta)

    @classmethod
    def permissive(cls, mechanisms: frozenset[str] | None = None) -> PartyPolicy:
        """Any mechanism and epsilon: for in-process runs (``vfl.fit``) where one caller picks every party's plan."""
        return cls(ALL_MECHANISMS if mechanisms is None else frozenset(mechanisms), None, None, None)


@dataclass(frozen=True)
class PlanSummary:
    """The facts of a PLAN a party printed and agreed to."""

    mechanism: str
    model: str
    epsilon: float | None
    true_epsilon: float | None
    delta: float | None
    parties: list[tuple[str, int, bool]] = field(default_factory=list)
    key_bits: int | None = None
    index: int = 0
    #: the party whose column count includes the public intercept column (None: no intercept)
    intercept_party: str | None = None
    #: the label owner also releases beta = (1/N) y'y (linear FM, ``release_beta`` in the params)
    releases_yty: bool = False


def _number(params: dict, key: str) -> float | None:
    value = params.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigurationError(f"the plan's {key} is not a finite number: {value!r}")
    return float(value)


def check_plan(body: dict[str, Any], policy: PartyPolicy, *, name: str, n_rows: int,
               true_epsilon: float | None = None) -> PlanSummary:
    """Check a PLAN body against ``policy`` (and this party's own facts); one-line ConfigurationError if refused.

    ``true_epsilon``: the epsilon the party's own mechanism reports for this plan (its privacy report), when
    built; the policy applies to ``max(nominal, true)``.
    """
    mechanism = str(body.get("mechanism"))
    if mechanism not in policy.allow_mechanisms:
        hint = (" (it adds no noise: the coordinator would see this party's exact statistics)"
                if mechanism in UNPROTECTED_MECHANISMS else
                " (never formally DP: each co-party learns X beta of the others exactly, docs/dp_bcd.md)"
                if mechanism in NOT_FORMALLY_DP else "")
        raise ConfigurationError(f"party {name} refuses mechanism {mechanism!r}{hint}; its policy allows "
                                 f"{', '.join(sorted(policy.allow_mechanisms))} (to run it, add {mechanism} to "
                                 "--allow-mechanisms)")
    raw_params = body.get("params")
    params: dict[str, Any] = raw_params if isinstance(raw_params, dict) else {}
    eps = _number(params, "epsilon")
    delta = _number(params, "delta")
    if mechanism not in UNPROTECTED_MECHANISMS:
        if eps is None:
            raise ConfigurationError(f"the plan gives no epsilon for mechanism {mechanism}")
        worst = max(eps, true_epsilon) if true_epsilon is not None else eps
        if policy.max_epsilon is not None and worst > policy.max_epsilon:
            raise ConfigurationError(f"party {name} refuses epsilon {worst:g} (true epsilon of the plan): above its "
                                     f"maximum {policy.max_epsilon:g} (--max-epsilon)")
        if policy.min_epsilon is not None and eps < policy.min_epsilon:
            raise ConfigurationError(f"party {name} refuses epsilon {eps:g}: below its minimum "
                                     f"{policy.min_epsilon:g} (--min-epsilon)")
        if delta is not None and policy.max_delta is not None and delta > policy.max_delta:
            raise ConfigurationError(f"party {name} refuses delta {delta:g}: above its maximum {policy.max_delta:g} "
                                     "(--max-delta)")
    key_bits = params.get("key_bits")
    if key_bits is not None and (isinstance(key_bits, bool) or not isinstance(key_bits, int)
                                 or key_bits > policy.max_key_bits):
        raise ConfigurationError(f"party {name} refuses {key_bits!r}-bit keys (at most {policy.max_key_bits})")
    parties = body.get("parties")
    if not isinstance(parties, list) or not all(isinstance(p, dict) for p in parties):
        raise ConfigurationError("the plan's party list is malformed")
    if not 1 <= len(parties) <= MAX_PLAN_PARTIES:
        raise ConfigurationError(f"the plan lists {len(parties)} parties; refused (at most {MAX_PLAN_PARTIES})")
    described: list[tuple[str, int, bool]] = []
    intercept_party: str | None = None
    for p in parties:
        if not is_name(p.get("name")):   # before it is printed in the plan line: a name, not terminal text
            raise ConfigurationError(f"the plan names a party {p.get('name')!r:.80}: not a party name; refused")
        count = p.get("n_features")
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count < max(n_rows, 2):
            raise ConfigurationError(f"the plan gives party {p.get('name')!r} {count!r} columns for {n_rows} rows; "
                                     "refused (a column count >= the row count would let the key holder's "
                                     "decryptions reveal its table)")
        described.append((str(p.get("name")), count, bool(p.get("label_owner"))))
        if p.get("intercept") is True and count >= 1:
            intercept_party = str(p.get("name"))
    index = body.get("index")
    if not isinstance(index, int) or not 0 <= index < len(described) or described[index][0] != name:
        raise ConfigurationError("the plan does not describe this party")
    return PlanSummary(mechanism, str(body.get("model")), eps, true_epsilon, delta, described,
                       key_bits if isinstance(key_bits, int) else None, index, intercept_party,
                       params.get("release_beta") is True and body.get("model") == "linear")


def describe_plan(summary: PlanSummary) -> str:
    """One line a party prints before it runs the plan."""
    def columns(name: str, count: int) -> str:
        if name == summary.intercept_party:   # its count includes the public constant column
            return f"{count - 1} col{'s' if count != 2 else ''} + intercept"
        return f"{count} col{'s' if count != 1 else ''}"

    who = ", ".join(f"{n} ({columns(n, c)}{', label' if lab else ''})" for n, c, lab in summary.parties)
    privacy = "NO noise" if summary.mechanism in UNPROTECTED_MECHANISMS else f"epsilon {summary.epsilon:g}"
    if summary.true_epsilon is not None and summary.epsilon is not None and summary.true_epsilon > summary.epsilon:
        privacy += f" (true epsilon {summary.true_epsilon:g})"
    if summary.delta is not None and summary.mechanism not in UNPROTECTED_MECHANISMS:
        privacy += f", delta {summary.delta:g}"
    keys = f", {summary.key_bits}-bit keys" if summary.key_bits else ""
    yty = ", the label owner also releases y'y (noised)" if summary.releases_yty else ""
    return f"plan: {summary.mechanism} ({privacy}), {summary.model} model, parties {who}{keys}{yty}"


@dataclass(frozen=True)
class SitePolicy:
    """What a CAPE site (``vfl site`` for capeFM, ``vfl djica-site`` for capePCA + capeDJICA) agrees to run.

    The aggregator's plan fixes epsilon, delta, the number of colluding sites S_C the noise withstands, the
    calibration and (capeDJICA) the number of rounds; every site derives its own noise from it. Like a party
    (:class:`PartyPolicy`), a site checks the plan before it computes or releases any statistic: the *true*
    epsilon of the whole plan (as the site computes it: the paper calibration's larger value, all planned rounds)
    must be at most
    ``max_epsilon``, delta at most ``max_delta``, and S_C at least ``min_colluders``. A site in the test-only
    no-noise mode has chosen that itself and is not checked.
    """

    max_epsilon: float | None = DEFAULT_MAX_EPSILON
    max_delta: float | None = DEFAULT_MAX_DELTA
    min_colluders: int = 0

    def __post_init__(self) -> None:
        if self.max_epsilon is not None and not (math.isfinite(self.max_epsilon) and self.max_epsilon > 0):
            raise ConfigurationError(f"--max-epsilon must be a finite number > 0, got {self.max_epsilon}")
        if self.max_delta is not None and not 0 < self.max_delta < 1:
            raise ConfigurationError(f"--max-delta must lie in (0, 1), got {self.max_delta}")
        check_param("--min-colluders", self.min_colluders, [Interval(int, 0, None, closed="left")])

    @classmethod
    def permissive(cls) -> SitePolicy:
        """Any plan: for in-process runs (``vfl.fit_sites``, ``vfl.fit_ica_sites``) where one caller picks it."""
        return cls(None, None, 0)


def check_site_plan(policy: SitePolicy, *, what: str, epsilon: float, true_epsilon: float, delta: float,
                    n_colluders: int, n_sites: int, test_noise: bool, rounds: int | None = None) -> str:
    """Check a CAPE plan against the site's policy; the one line the site prints, or ConfigurationError naming
    the option that refused it."""
    rounds_text = f", {rounds} rounds" if rounds is not None else ""
    if test_noise:
        return f"plan: {what}, {n_sites} sites{rounds_text}, NO noise (test mode of this site)"
    if policy.max_epsilon is not None and not true_epsilon <= policy.max_epsilon:
        claimed = f" (claimed {epsilon:g})" if true_epsilon > epsilon * (1 + 1e-9) else ""
        raise ConfigurationError(f"the aggregator's {what} plan has true epsilon {true_epsilon:g}{claimed}, above "
                                 f"this site's --max-epsilon {policy.max_epsilon:g}; refused before anything is "
                                 "released")
    if policy.max_delta is not None and not delta <= policy.max_delta:
        raise ConfigurationError(f"the aggregator's {what} plan has delta {delta:g}, above this site's --max-delta "
                                 f"{policy.max_delta:g}; refused before anything is released")
    if n_colluders < policy.min_colluders:
        raise ConfigurationError(f"the aggregator's {what} plan withstands {n_colluders} colluding site(s), fewer "
                                 f"than this site's --min-colluders {policy.min_colluders}; refused before "
                                 "anything is released")
    true_text = f" (true epsilon {true_epsilon:g})" if true_epsilon > epsilon * (1 + 1e-9) else ""
    return (f"plan: {what}, {n_sites} sites{rounds_text}, epsilon {epsilon:g}{true_text}, delta {delta:g}, "
            f"withstands the aggregator plus {n_colluders} colluding site(s)")
