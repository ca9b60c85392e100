"""The coordinator role: registration, plan, relaying secure products, assembling, solving, releasing.

The coordinator holds no Paillier key and no data. It

1. waits (at most ``timeout`` seconds) for K parties to REGISTER and checks them: unique names, exactly
   one label owner, equal row counts, equal row-ID digests (misaligned tables), sane public bounds;
2. orders the parties (by their ``order`` if all give one, else by name), builds the
   :class:`~vfl.fm.dissection.DissectionPlan` (Xu et al. 2021 §4) and sends each party the PLAN;
3. relays ENC_REQUEST (encryptor -> responder) and MASKED_RESPONSE (responder -> encryptor) without
   being able to read them, and collects single-party BLOCKs and the two SHAREs of every cross block:
   ``block = scale * (share_enc + share_resp) 2^-2p`` is already noisy (noise was added inside the
   ciphertext) and includes the parties' local offsets;
4. reassembles (beta, alpha, M), projects M with the mechanism's public eigenvalue floor and solves
   (spec §2.5), writes the model JSON atomically, sends RESULT and prints the privacy report.

Liveness: every party must be heard from at least every ``timeout`` seconds (parties send heartbeats
while they compute); otherwise, or on a party's ERROR, the run is aborted: every party gets ABORT,
:class:`~vfl.exceptions.PartyFailure` is raised, and no model file is written. Undecodable input is
dropped by the transport and never ends a run.
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vfl.exceptions import (
    ConfigurationError,
    DataValidationError,
    DegenerateNoisyObjective,
    PartyFailure,
    ProtocolError,
    VFLError,
)
from vfl.fm.dissection import Block, DissectionPlan
from vfl.fm.domain import fixed_point_shrink
from vfl.net.messages import MAX_MESSAGE_BYTES, Message, MessageType
from vfl.net.modelio import FittedModel, PartyColumns
from vfl.net.transport import CurveServerKeys, ServerTransport
from vfl.rng import RandomState, make_rng

__all__ = ["RunSettings", "Coordinator", "Registration", "FM_MECHANISMS", "BCD_MECHANISMS"]

FM_MECHANISMS = ("none", "laplace-fm", "gaussian-fm", "relaxed-fm")
BCD_MECHANISMS = ("bcd", "dp-bcd")
HEARTBEAT_SECONDS = 1.0
MIN_MESSAGE_BYTES = 64 * 1024  # below this even a PLAN with a few hundred feature names is refused


@dataclass
class RunSettings:
    """Public parameters of one run (all of them travel to the parties in the PLAN)."""

    n_parties: int
    model: str = "linear"
    mechanism: str = "gaussian-fm"
    epsilon: float | None = 1.0
    delta: float | None = 1e-5
    key_bits: int = 2048
    allow_insecure_keys: bool = False
    precision_bits: int | None = None
    timeout: float = 120.0
    mechanism_options: dict[str, Any] = field(default_factory=dict)
    lambda_floor: float | None = None
    gamma: float = 1.2
    rounds: int = 5
    tol: float | None = None
    max_run_seconds: float | None = 86400.0
    fit_intercept: bool = True
    randomness: str = "short-exponent"   # Paillier encryption randomness (vfl.secure.fastmath); or "standard"

    def validate(self) -> None:
        """Check every public parameter before anyone registers (so a typo never wastes the parties' time).

        FM parameters are checked by building the mechanism on a one-feature dummy plan: the same
        constructor the parties run after the PLAN, so epsilon/delta, calibration (``classical`` needs
        eps < 1), ``sym``, ``fm_sensitivity`` and the domain fail here with the same message.
        """
        import warnings

        from vfl.privacy.calibration import validate_delta, validate_epsilon

        if isinstance(self.n_parties, bool) or not isinstance(self.n_parties, int) or not 1 <= self.n_parties <= 1000:
            raise ConfigurationError(f"--parties must be an integer in [1, 1000], got {self.n_parties}")
        if self.model not in ("linear", "logistic"):
            raise ConfigurationError(f"model must be linear or logistic, got {self.model!r}")
        if self.mechanism not in FM_MECHANISMS + BCD_MECHANISMS:
            raise ConfigurationError(f"unknown mechanism {self.mechanism!r}; choose one of "
                                     f"{', '.join(FM_MECHANISMS + BCD_MECHANISMS)}")
        if self.mechanism in BCD_MECHANISMS and self.model != "linear":
            raise ConfigurationError("bcd and dp-bcd train linear regression only")
        if self.key_bits < 2048 and not self.allow_insecure_keys:
            raise ConfigurationError(f"{self.key_bits}-bit keys are insecure; use >= 2048")
        if self.randomness not in ("short-exponent", "standard"):
            raise ConfigurationError(f"randomness must be 'short-exponent' or 'standard', got {self.randomness!r}")
        if not (self.timeout > 0 and math.isfinite(self.timeout)):
            raise ConfigurationError(f"timeout must be a positive number of seconds, got {self.timeout}")
        if self.max_run_seconds is not None and not (self.max_run_seconds > 0 and math.isfinite(self.max_run_seconds)):
            raise ConfigurationError(f"max run time must be a positive number of seconds, got {self.max_run_seconds}")
        if self.mechanism in ("laplace-fm", "gaussian-fm", "relaxed-fm", "dp-bcd"):
            if self.epsilon is None or not self.epsilon > 0:
                raise ConfigurationError(f"mechanism {self.mechanism} needs --epsilon > 0")
            validate_epsilon(self.epsilon)  # finite
        if self.mechanism in ("gaussian-fm", "relaxed-fm"):
            if self.delta is None or not 0 < self.delta < 1:
                raise ConfigurationError(f"mechanism {self.mechanism} needs 0 < --delta < 1")
            validate_delta(self.delta)
        if self.mechanism in BCD_MECHANISMS:
            self._validate_bcd()
            return
        if self.precision_bits is not None and (isinstance(self.precision_bits, bool)
                                                or not isinstance(self.precision_bits, int)
                                                or not 1 <= self.precision_bits <= 52):
            raise ConfigurationError(f"--precision-bits must be an integer in [1, 52], got {self.precision_bits}")
        if self.lambda_floor is not None and not (math.isfinite(self.lambda_floor) and self.lambda_floor >= 0):
            raise ConfigurationError(f"lambda_floor must be a finite number >= 0, got {self.lambda_floor}")
        if "radii" in self.mechanism_options:
            raise ConfigurationError("the runtime always uses the radii r_k = sqrt(d_k/d) its parties prepare their "
                                     "columns with; option 'radii' is for in-process experiments only")
        from vfl.fm.dissection import DissectionPlan
        from vfl.privacy.mechanisms import make_mechanism

        opts = {k: v for k, v in self.mechanism_options.items() if k != "domain"}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # calibration="paper" warns once more when the real run builds it
            make_mechanism(self.mechanism, plan=DissectionPlan([1], 0, model=self.model), n_samples=1,
                           epsilon=self.epsilon, delta=self.delta, domain=self.domain, **opts)

    def _validate_bcd(self) -> None:
        if isinstance(self.rounds, bool) or not isinstance(self.rounds, int) or self.rounds < 1:
            raise ConfigurationError(f"--rounds must be an integer >= 1, got {self.rounds}")
        if self.mechanism == "dp-bcd" and not (math.isfinite(self.gamma) and self.gamma > 1):
            raise ConfigurationError(f"--gamma must be a number > 1, got {self.gamma}")
        if self.tol is not None and not (math.isfinite(self.tol) and self.tol > 0):
            raise ConfigurationError(f"--tol must be a number > 0, got {self.tol}")
        unknown = set(self.mechanism_options) - {"abort_rule", "noise_calibration"}
        if unknown:
            raise ConfigurationError(f"option(s) {sorted(unknown)} do not apply to mechanism {self.mechanism}")
        from vfl.models.bcd import ABORT_RULES, NOISE_CALIBRATIONS

        if self.mechanism_options.get("abort_rule", "paper") not in ABORT_RULES:
            raise ConfigurationError(f"abort_rule must be one of {', '.join(ABORT_RULES)}")
        if self.mechanism_options.get("noise_calibration", "half-normal") not in NOISE_CALIBRATIONS:
            raise ConfigurationError(f"noise_calibration must be one of {', '.join(NOISE_CALIBRATIONS)}")

    @property
    def domain(self) -> str:
        from vfl.privacy.mechanisms import DEFAULT_DOMAIN

        return self.mechanism_options.get("domain") or DEFAULT_DOMAIN.get(self.mechanism, "linf")


@dataclass
class Registration:
    """What a party declared when it registered (all public)."""

    peer: bytes
    name: str
    n_rows: int
    features: list[str]
    label_owner: bool
    id_digest: str | None
    order: int | None
    bounds: list[list[float]] | None
    label_bounds: list[float] | None
    bounds_from_data: bool


class Coordinator:
    """Binds at construction (so ``endpoint`` is known before parties start); ``run()`` does the rest."""

    def __init__(self, settings: RunSettings, bind: str = "tcp://127.0.0.1:5555", *,
                 curve: CurveServerKeys | None = None, out: str | None = None,
                 log: Callable[[str], None] | None = None, max_message_bytes: int = MAX_MESSAGE_BYTES,
                 random_state: RandomState = None) -> None:
        settings.validate()
        if not MIN_MESSAGE_BYTES <= max_message_bytes <= MAX_MESSAGE_BYTES:
            raise ConfigurationError(f"--max-message-bytes must lie in [{MIN_MESSAGE_BYTES}, {MAX_MESSAGE_BYTES}], "
                                     f"got {max_message_bytes}")
        self.rng = make_rng(random_state)
        self.settings = settings
        self.out = out
        self.log = log or (lambda s: None)
        self.run_id = secrets.token_hex(16)
        self.transport = ServerTransport(bind, run_id=self.run_id, curve=curve, max_message_bytes=max_message_bytes)
        self.endpoint = self.transport.endpoint
        self.parties: list[Registration] = []
        self.result: FittedModel | None = None
        self._last_heartbeat = 0.0
        self._deadline = math.inf
        self._relayed: set[tuple[str, MessageType]] = set()

    # ------------------------------------------------------------------ public
    def run(self) -> FittedModel:
        """Drive the whole run; returns the released model or raises (after aborting every party)."""
        if self.settings.max_run_seconds is not None:
            self._deadline = time.monotonic() + self.settings.max_run_seconds
        try:
            regs = self._register_all()
            if self.settings.mechanism in BCD_MECHANISMS:
                model = self._run_bcd(regs)
            else:
                model = self._run_fm(regs)
            text = model.to_json()  # serialised (and checked) before anything is written or sent
            if self.out:
                from vfl.net.modelio import atomic_write_text

                atomic_write_text(self.out, text + "\n")
            self.result = model
        except BaseException as exc:
            self._abort(exc)
            self.transport.close()
            raise
        # the model is released (file written): a party that vanished now misses its copy but cannot undo the
        # release, so delivery is best effort and never turns a written model into a failed run
        try:
            for r in regs:
                try:
                    self._send(r.peer, Message(MessageType.RESULT, {"model": model.to_dict()}))
                except VFLError as exc:
                    self.log(f"could not deliver the model to party {r.name}: {exc}")
        finally:
            self.transport.close()
        return model

    # ------------------------------------------------------------------ helpers
    def _send(self, peer: bytes, msg: Message) -> None:
        self.transport.send(peer, msg)

    def _abort(self, exc: BaseException) -> None:
        reason = str(exc) or type(exc).__name__
        for r in self.parties:
            try:
                self._send(r.peer, Message(MessageType.ABORT, {"reason": reason[:2000], "error": type(exc).__name__}))
            except VFLError:
                pass

    def heartbeat(self) -> None:
        now = time.monotonic()
        if now - self._last_heartbeat >= HEARTBEAT_SECONDS:
            self._last_heartbeat = now
            for r in self.parties:
                try:
                    self._send(r.peer, Message(MessageType.HEARTBEAT))
                except VFLError:
                    pass  # detected by the silence check

    def check_liveness(self) -> None:
        now = time.monotonic()
        if now > self._deadline:  # parties that heartbeat but never finish cannot hold the run open forever
            raise PartyFailure(f"the run did not finish within {self.settings.max_run_seconds:g} s (--max-run-time); "
                               "run aborted, no model written")
        for r in self.parties:
            if now - self.transport.last_seen.get(r.peer, now) > self.settings.timeout:
                raise PartyFailure(f"party {r.name} sent nothing for {self.settings.timeout:g} s "
                                   "(crashed, killed or disconnected); run aborted, no model written")

    def receive(self) -> tuple[Registration, Message] | None:
        """Next message from a registered party (heartbeats and liveness handled here)."""
        self.heartbeat()
        self.check_liveness()
        got = self.transport.recv(0.2)
        if got is None:
            return None
        peer, msg = got
        reg = next((r for r in self.parties if r.peer == peer), None)
        if reg is None:
            if msg.type is MessageType.REGISTER:
                self._refuse(peer, f"the run already has its {self.settings.n_parties} parties")
            return None
        if msg.sender != reg.name:
            self.transport._reject(f"peer registered as {reg.name} claims to be {msg.sender}")
            return None
        if msg.type is MessageType.ERROR:
            raise PartyFailure(f"party {reg.name} failed: {msg.body['reason']}")
        if msg.type is MessageType.HEARTBEAT:
            return None
        return reg, msg

    def _refuse(self, peer: bytes, reason: str) -> None:
        try:
            self._send(peer, Message(MessageType.ABORT, {"reason": reason[:2000], "error": "ConfigurationError"}))
        except VFLError:
            pass

    # ------------------------------------------------------------------ registration
    def _register_all(self) -> list[Registration]:
        k = self.settings.n_parties
        deadline = time.monotonic() + self.settings.timeout
        self.log(f"coordinator listening on {self.endpoint}; waiting for {k} parties (run {self.run_id[:8]})")
        while len(self.parties) < k:
            if time.monotonic() > deadline:
                have = ", ".join(r.name for r in self.parties) or "none"
                raise PartyFailure(f"only {len(self.parties)} of {k} parties registered within "
                                   f"{self.settings.timeout:g} s (registered: {have}); run aborted")
            self.heartbeat()
            self.check_liveness()
            got = self.transport.recv(0.2)
            if got is None:
                continue
            peer, msg = got
            known = next((r for r in self.parties if r.peer == peer), None)
            if known is not None:
                if msg.type is MessageType.ERROR:
                    raise PartyFailure(f"party {known.name} failed: {msg.body['reason']}")
                continue
            if msg.type is not MessageType.REGISTER:
                self.transport._reject(f"{msg.type.value} from an unregistered peer")
                continue
            try:
                reg = self._parse_registration(peer, msg)
                self._check_registration(reg)
            except VFLError as exc:
                self._refuse(peer, str(exc))
                raise
            self.parties.append(reg)
            self._send(peer, Message(MessageType.WELCOME, {"run": self.run_id}))
            self.log(f"  registered {reg.name}: {reg.n_rows} rows, {len(reg.features)} features"
                     + (", label owner" if reg.label_owner else ""))
        self._check_complete()
        orders = [r.order for r in self.parties]
        if all(o is not None for o in orders):
            if len(set(orders)) != len(orders):
                raise ConfigurationError("two parties asked for the same position in the party order")
            self.parties.sort(key=lambda r: r.order)  # type: ignore[arg-type,return-value]
        else:
            self.parties.sort(key=lambda r: r.name)
        return self.parties

    def _parse_registration(self, peer: bytes, msg: Message) -> Registration:
        b = msg.body
        if b["name"] != msg.sender:
            raise ProtocolError(f"registration name {b['name']!r} differs from the sender {msg.sender!r}")
        return Registration(peer, b["name"], b["n_rows"], list(b["features"]), b["label_owner"],
                            b.get("id_digest"), b.get("order"), None, None, False)

    @staticmethod
    def _parse_bounds(reg: Registration, body: dict) -> None:
        """Public column bounds a party reports in READY (FM runs)."""
        if not reg.features:
            return
        raw = body.get("bounds")
        pairs = raw.get("pairs") if isinstance(raw, dict) else None
        ok = (isinstance(pairs, list) and len(pairs) == len(reg.features)
              and all(isinstance(p, list) and len(p) == 2 and all(isinstance(v, (int, float))
                      and not isinstance(v, bool) and math.isfinite(v) for v in p) and p[0] < p[1] for p in pairs))
        if not ok:
            raise ProtocolError(f"party {reg.name} sent invalid bounds")
        reg.bounds = [[float(lo), float(hi)] for lo, hi in pairs]
        reg.bounds_from_data = bool(body.get("bounds_from_data", False))

    def _check_registration(self, reg: Registration) -> None:
        for r in self.parties:
            if r.name == reg.name:
                raise ConfigurationError(f"two parties registered with the name {reg.name!r}; names must be unique")
            if r.label_owner and reg.label_owner:
                raise ConfigurationError(f"two label owners ({r.name} and {reg.name}); exactly one party may "
                                         "pass --label")
            if r.n_rows != reg.n_rows:
                raise DataValidationError(f"party {reg.name} has {reg.n_rows} rows but {r.name} has {r.n_rows}: "
                                          "the parties' tables are not aligned")
            if (r.id_digest is None) != (reg.id_digest is None):
                with_id = r.name if r.id_digest is not None else reg.name
                without = reg.name if with_id == r.name else r.name
                raise DataValidationError(f"party {with_id} gave a row-ID column but {without} did not "
                                          "(use --id on every party or on none)")
            if r.id_digest is not None and r.id_digest != reg.id_digest:
                raise DataValidationError(f"the row IDs of {reg.name} differ from those of {r.name} "
                                          "(different rows or a different order): align the tables first")

    def _check_complete(self) -> None:
        owners = [r for r in self.parties if r.label_owner]
        if not owners:
            raise ConfigurationError("no party holds the label (exactly one party must pass --label)")
        if sum(len(r.features) for r in self.parties) == 0:
            raise ConfigurationError("the parties hold no features")

    # ------------------------------------------------------------------ FM run
    def plan_message(self, index: int, regs: list[Registration], label_owner: int,
                     params: dict[str, Any], intercept_party: int | None = None) -> Message:
        s = self.settings
        parties = [{"name": r.name, "n_features": len(r.features) + (1 if i == intercept_party else 0),
                    "features": r.features, "label_owner": r.label_owner, "intercept": i == intercept_party}
                   for i, r in enumerate(regs)]
        return Message(MessageType.PLAN, {"index": index, "parties": parties, "model": s.model,
                                          "mechanism": s.mechanism, "params": params, "n_samples": regs[0].n_rows,
                                          "label_owner": label_owner})

    def _run_fm(self, regs: list[Registration]) -> FittedModel:
        from vfl.fm.solver import solve_details
        from vfl.privacy.mechanisms import make_mechanism
        from vfl.secure.encoding import DEFAULT_PRECISION_BITS
        from vfl.secure.products import combine_shares

        s = self.settings
        n = regs[0].n_rows
        L = next(i for i, r in enumerate(regs) if r.label_owner)
        # FM runs: the label owner carries the public constant column (spec pitfall 4); it counts in its radius
        icpt = L if s.fit_intercept else None
        counts = [len(r.features) + (1 if i == icpt else 0) for i, r in enumerate(regs)]
        plan = DissectionPlan(counts, L, model=s.model)
        names = [r.name for r in regs]
        opts = {k: v for k, v in s.mechanism_options.items() if k != "domain"}
        mech = make_mechanism(s.mechanism, plan=plan, n_samples=n, epsilon=s.epsilon, delta=s.delta,
                              domain=s.domain, party_names=names, **opts)
        p_bits = s.precision_bits or DEFAULT_PRECISION_BITS
        if mech.domain == "l2":
            fixed_point_shrink(plan.n_features, p_bits)   # refuses a grid too coarse for d before any party works
        params = {"epsilon": s.epsilon, "delta": s.delta, "precision_bits": p_bits, "key_bits": s.key_bits,
                  "allow_insecure_keys": s.allow_insecure_keys, "domain": mech.domain, "mechanism_options": opts,
                  "randomness": s.randomness}
        for i, r in enumerate(regs):
            self._send(r.peer, self.plan_message(i, regs, L, params, intercept_party=icpt))
        self.log(f"plan: {len(plan.blocks)} blocks ({len(plan.cross_blocks())} secure products), "
                 f"mechanism {s.mechanism}, {s.key_bits}-bit keys")
        values: dict[str, np.ndarray] = {}
        shares: dict[str, dict[int, np.ndarray]] = {b.name: {} for b in plan.cross_blocks()}
        ready: dict[int, dict] = {}
        index_of = {r.peer: i for i, r in enumerate(regs)}
        while len(values) < len(plan.blocks) or len(ready) < len(regs):
            got = self.receive()
            if got is None:
                continue
            reg, msg = got
            i = index_of[reg.peer]
            if msg.type is MessageType.READY:
                if i in ready:
                    raise ProtocolError(f"second READY from {reg.name}")
                self._parse_bounds(reg, msg.body)
                ready[i] = msg.body
                continue
            block = self._block_of(plan, msg)
            if msg.type in (MessageType.ENC_REQUEST, MessageType.MASKED_RESPONSE):
                self._relay(plan, block, i, regs, msg)
            elif msg.type is MessageType.BLOCK:
                if block.cross or block.noised_by != i or block.name in values:
                    raise ProtocolError(f"party {reg.name} sent block {block.name} it does not own")
                arr = msg.array()
                if arr.shape != block.shape:
                    raise ProtocolError(f"block {block.name} from {reg.name} has shape {arr.shape}, "
                                        f"expected {block.shape}")
                values[block.name] = arr.astype(float)
            elif msg.type is MessageType.SHARE:
                if not block.cross or i not in (block.encryptor, block.responder) or i in shares[block.name]:
                    raise ProtocolError(f"unexpected share of {block.name} from {reg.name}")
                share = msg.ints()
                expected = self._product_shape(plan, block)
                if share.shape != expected:
                    raise ProtocolError(f"share of {block.name} has shape {share.shape}, expected {expected}")
                shares[block.name][i] = share
                if len(shares[block.name]) == 2:
                    try:
                        raw = combine_shares(*shares[block.name].values(), precision_bits=p_bits)
                    except (ArithmeticError, ValueError):  # e.g. a share too large for a float
                        raw = np.array([np.inf])
                    if not np.all(np.isfinite(raw)):
                        raise ProtocolError(f"the shares of {block.name} do not add up to finite numbers")
                    from vfl.privacy.fixed_point import orient

                    values[block.name] = plan.scale(block, n) * orient(block, raw)
                    self.log(f"  block {block.name} complete")
            else:
                raise ProtocolError(f"unexpected {msg.type.value} from {reg.name}")
        objective = plan.assemble(values)
        floor = s.lambda_floor if s.lambda_floor is not None else mech.lambda_floor
        try:
            sol = solve_details(objective, lambda_floor=floor)
        except (ArithmeticError, ValueError, np.linalg.LinAlgError) as exc:
            if isinstance(exc, VFLError):
                raise
            raise DegenerateNoisyObjective(f"the released objective cannot be solved ({type(exc).__name__})") from None
        if not np.all(np.isfinite(sol.w)):
            raise DegenerateNoisyObjective("the released objective has no finite minimiser; no model written")
        report = mech.privacy_report().to_dict()
        notes = report.setdefault("notes", [])
        for r in regs:
            if r.bounds_from_data:
                notes.append(f"party {r.name}'s feature bounds were taken from its data: NOT differentially private")
                report["formal_dp"] = False
        if any(r.get("seeded") for r in ready.values()):
            report["seeded"] = True
        label_info = ready.get(L, {})
        label_bounds = self._label_bounds(regs[L], label_info) if s.model == "linear" else None
        if label_info.get("label_bounds_from_data"):
            notes.append("the label bounds were taken from the data: NOT differentially private")
            report["formal_dp"] = False
        # the parties' prepared columns: u(x)/sqrt(d), shrunk by c so the 2^-p rounding keeps ||x|| <= 1
        scale = (fixed_point_shrink(plan.n_features, p_bits) / math.sqrt(plan.n_features)
                 if mech.domain == "l2" else 1.0)
        columns = [PartyColumns(r.name, r.features, r.bounds, scale, r.label_owner, intercept=(i == icpt))
                   for i, r in enumerate(regs)]
        model = FittedModel(s.model, s.mechanism, columns, sol.w, label_bounds, report, n,
                            self.run_id, {"lambda_floor": floor, "n_floored_eigenvalues": sol.n_floored,
                                          "domain": mech.domain, "precision_bits": p_bits, "key_bits": s.key_bits})
        from vfl.net.modelio import report_text

        self.log(report_text(model))
        return model

    def _run_bcd(self, regs: list[Registration]) -> FittedModel:
        """Relay (DP-)BCD remainders around the ring and publish the coefficients only if nobody aborted."""
        from vfl.models.bcd import FORMAL_DP_REASON, DPBCDPrivacyReport, LedgerEntry, per_message_epsilon

        s = self.settings
        k, n = len(regs), regs[0].n_rows
        if k < 2:
            raise ConfigurationError("(DP-)BCD needs at least 2 parties")
        L = next(i for i, r in enumerate(regs) if r.label_owner)
        params = {"epsilon": s.epsilon, "gamma": s.gamma, "rounds": s.rounds, "tol": s.tol,
                  "abort_rule": s.mechanism_options.get("abort_rule", "paper"),
                  "noise_calibration": s.mechanism_options.get("noise_calibration", "half-normal")}
        for i, r in enumerate(regs):
            self._send(r.peer, self.plan_message(i, regs, L, params))
        self.log(f"plan: {s.mechanism} ring starting at {regs[L].name}, {s.rounds} rounds")
        ring = [(L + j) % k for j in range(k)]
        index_of = {r.peer: i for i, r in enumerate(regs)}
        coefs: dict[int, np.ndarray] = {}
        ledger: list[LedgerEntry] = []
        eps_r = per_message_epsilon(s.epsilon, k, s.rounds) if s.mechanism == "dp-bcd" else 0.0
        seeded = False
        rounds_run, converged = s.rounds, False
        while len(coefs) < k:
            got = self.receive()
            if got is None:
                continue
            reg, msg = got
            i = index_of[reg.peer]
            if msg.type is MessageType.READY:
                seeded = seeded or bool(msg.body.get("seeded"))
            elif msg.type is MessageType.BCD_REMAINDER:
                nxt = ring[(ring.index(i) + 1) % k]
                if msg.body["to"] != regs[nxt].name or msg.array().shape != (n,):
                    raise ProtocolError(f"party {reg.name} sent a malformed remainder")
                t = int(msg.body["round"]) - (1 if nxt == L else 0)
                ledger.append(LedgerEntry(t, i, nxt, eps_r))
                body = dict(msg.body)
                body["origin"] = reg.name
                self._send(regs[nxt].peer, Message(MessageType.BCD_REMAINDER, body, msg.payload))
            elif msg.type is MessageType.BCD_COEF:
                if msg.body["status"] == "converged" and i == L and s.tol is not None and not converged:
                    converged, rounds_run = True, int(msg.body.get("rounds_run", 0))
                    if not 1 <= rounds_run < s.rounds:
                        raise ProtocolError(f"party {reg.name} reported convergence after {rounds_run} rounds")
                    for j, r in enumerate(regs):
                        if j != L:
                            self._send(r.peer, Message(MessageType.BCD_STOP, {"rounds_run": rounds_run}))
                elif msg.body["status"] != "completed":
                    from vfl.exceptions import DPBCDAbort

                    raise DPBCDAbort(str(msg.body.get("reason") or f"party {reg.name} aborted"))
                beta = msg.array()
                if beta.shape != (len(reg.features),) or i in coefs:
                    raise ProtocolError(f"party {reg.name} sent malformed coefficients")
                if i == ring[-1] and not converged:  # its last remainder (back to L) is planned but never sent
                    ledger.append(LedgerEntry(s.rounds, i, L, eps_r))
                coefs[i] = beta.astype(float)
            else:
                raise ProtocolError(f"unexpected {msg.type.value} from {reg.name}")
        w = np.concatenate([coefs[i] for i in range(k)])
        notes: tuple[str, ...] = ("remainders are relayed by the coordinator, which sees them as the receiving "
                                  "party does",)
        if s.tol is not None:
            notes += ("the data-dependent stopping decision (tol) is a release the paper's accounting omits",)
        if s.mechanism == "dp-bcd":
            report = DPBCDPrivacyReport(float(s.epsilon), eps_r, k * s.rounds, tuple(ledger), float(s.gamma), s.rounds,
                                        k, params["abort_rule"], params["noise_calibration"], seeded,
                                        notes=notes).to_dict()
            report["mechanism"] = "dp-bcd"
        else:
            report = {"mechanism": "bcd", "formal_dp": False, "epsilon": None,
                      "notes": ["BCD adds no noise: the model and every remainder reveal the data"],
                      "reason": FORMAL_DP_REASON}
        columns = [PartyColumns(r.name, r.features, None, 1.0, r.label_owner) for r in regs]
        model = FittedModel("linear", s.mechanism, columns, w, None, report, n, self.run_id,
                            {"rounds": s.rounds, "gamma": s.gamma, "tol": s.tol, "rounds_run": rounds_run,
                             "converged": converged})
        self.log(f"{s.mechanism}: {rounds_run} of at most {s.rounds} rounds" + (" (converged)" if converged else "")
                 + f"; formal DP: no ({FORMAL_DP_REASON})")
        return model

    @staticmethod
    def _label_bounds(owner: Registration, ready: dict) -> list[float]:
        """The label owner's public (lo, hi) of y, needed to map a linear model back to label units."""
        lb = ready.get("label_bounds")
        if not (isinstance(lb, list) and len(lb) == 2 and float(lb[0]) < float(lb[1])):
            raise ProtocolError(f"label owner {owner.name} sent no valid label bounds [lo, hi] with lo < hi")
        return [float(lb[0]), float(lb[1])]

    @staticmethod
    def _block_of(plan: DissectionPlan, msg: Message) -> Block:
        try:
            return plan.block(msg.body.get("block", ""))
        except KeyError:
            raise ProtocolError(f"{msg.type.value} names an unknown block {msg.body.get('block')!r}") from None

    @staticmethod
    def _product_shape(plan: DissectionPlan, block: Block) -> tuple[int, int]:
        def width(party: int) -> int:
            if block.kind == "alpha" and party == plan.label_owner and block.parties[0] != party:
                return 1
            return plan.feature_counts[party]

        return (width(block.encryptor), width(block.responder))  # type: ignore[arg-type]

    def _relay(self, plan: DissectionPlan, block: Block, i: int, regs: list[Registration], msg: Message) -> None:
        src, dst = ((block.encryptor, block.responder) if msg.type is MessageType.ENC_REQUEST
                    else (block.responder, block.encryptor))
        if i != src or msg.body["to"] != regs[dst].name:  # type: ignore[index]
            raise ProtocolError(f"party {regs[i].name} may not send {msg.type.value} for {block.name}")
        if (block.name, msg.type) in self._relayed:  # a second product would draw the block's noise twice
            raise ProtocolError(f"party {regs[i].name} sent a second {msg.type.value} for {block.name}; "
                                "each secure product runs once")
        self._relayed.add((block.name, msg.type))
        body = dict(msg.body)
        body["origin"] = regs[i].name
        self._send(regs[dst].peer, Message(msg.type, body, msg.payload))  # type: ignore[index]
