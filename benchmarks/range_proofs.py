"""Exact range proofs for the encryptor's operand (issue 20), built and measured; NOT shipped in vfl.

    nice -n 5 python benchmarks/range_proofs.py [--proofs 48] [--large-product run|extrapolate] [--out FILE.json]

Why. An encryptor that encrypts an amplified operand inside its declared slots reads a responder row with the DP noise
divided by the amplification (benchmarks/amplification_attack.py). The known countermeasure is a zero-knowledge
proof that every encrypted operand value lies in its declared range. Proofs with slack 2^kappa (the cut-and-choose
proof of Boudot 2000 / Lindell 2017 App. A proves x in [0, q] only for x < q/3; the ring-Pedersen proofs of Canetti
et al. 2020 prove l bits only up to l + epsilon bits) let the encryptor amplify by that slack, so they do not close
the attack. The exact construction measured here is bit decomposition:

* the encryptor sends ``c_t = Enc(bit_t) = (1 + bit_t N) r_t^N mod N^2`` for each of the k bits of each offset
  encoded value ``a' = a_int + 2^p`` (k = p + 1, p = vfl.secure.encoding.DEFAULT_PRECISION_BITS) with a
  non-interactive proof that c_t encrypts 0 or 1: the Cramer-Damgard-Schoenmakers (1994) OR composition of two
  Sigma protocols for "u is an N-th residue modulo N^2" (Damgard & Jurik 2001, the Paillier case s = 1; Baudron,
  Fouque, Pointcheval, Poupard & Stern 2001 use the same 1-out-of-2 proof for Paillier ballots), u_0 = c and
  u_1 = c g^-1 (g = 1 + N). The prover knows r with u_m = r^N. Real branch m: a_m = rho^N; simulated branch o:
  e_o, z_o random, a_o = z_o^N u_o^-e_o; challenge e = SHA-256(N, c, a_0, a_1, context) mod 2^128 (Fiat-Shamir),
  e_m = e - e_o mod 2^128, z_m = rho r^e_m mod N. The proof is (e_0, e_1, z_0, z_1); the verifier recomputes
  a_i = z_i^N u_i^-e_i and checks e_0 + e_1 = H(...) mod 2^128. Special soundness holds because 2^128 < min(p, q)
  (two accepting transcripts give an N-th root of u_0 or u_1), so a ciphertext of anything but 0 or 1 is accepted
  with probability <= 2^-128 per query to the hash;
* the responder builds the operand ciphertext itself, ``Enc(a') = prod_t c_t^(2^t)`` (Horner: squarings), and packs
  a row's values into one ciphertext ``prod_j Enc(a'_j)^(2^(w j))`` (w = the slot width), so every operand value is
  in [0, 2^k) by construction: no slack.

The prover (the key holder) knows the factorisation and uses CRT for every N-th power (modulo p^2 and q^2, exponents
p and q mod p-1 / q-1); the verifier has only N. Implemented with gmpy2; keys are 2048-bit vfl keys
(:func:`vfl.secure.keys.generate_keypair`).

Measured in one run: per-proof prover and verifier CPU (median of batches of ``--proofs`` proofs, process CPU time),
the responder's assembly of one packed row from its bit ciphertexts, a soundness check (a ciphertext of 2 is
rejected whichever branch the prover claims; a tampered proof, a proof moved to another ciphertext and a proof
replayed in another context are rejected), bytes on the wire, and the secure product's own CPU for the same shapes
(:func:`vfl.secure.products.secure_gram`, 2048-bit keys, one process, ``workers=1``: single-core CPU like the
proofs). Totals at the forest shape (517 x 13 values, responder 14 columns) and at 10^5 x 10 (responder 10 columns)
are the measured unit costs times the counts; the 10^5 product is run (default) or extrapolated from the forest
product's CPU per row (``--large-product extrapolate``). Also reported: the cost if a proof cost only ONE full
exponentiation modulo N^2 per value (a yardstick for constructions of constant size per value, e.g. square
decompositions over integer commitments, which need several). The issue's rule: ship as an option if the proofs cost
<= 3x the product, otherwise record the cost and the residual attack (docs/threat_model.md).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import secrets
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gmpy2
import numpy as np

from vfl.secure.encoding import DEFAULT_PRECISION_BITS
from vfl.secure.keys import generate_keypair
from vfl.secure.packing import SlotLayout, default_noise_bits
from vfl.secure.products import secure_gram

CHALLENGE_BITS = 128
_CHALLENGE_MASK = (1 << CHALLENGE_BITS) - 1
_DOMAIN = b"vfl-benchmark/paillier-bit-or-proof/v1"
P = DEFAULT_PRECISION_BITS
VALUE_BITS = P + 1


# ----------------------------------------------------------------------------- keys and arithmetic
@dataclass(frozen=True)
class ProverKey:
    """The key holder's Paillier key with CRT data: N, N^2 and p, q, p^2, q^2, (p^2)^-1 mod q^2."""

    n: Any
    n2: Any
    p: Any
    q: Any
    p2: Any
    q2: Any
    p2_inv: Any
    q_mod: Any   # q mod (p - 1)
    p_mod: Any   # p mod (q - 1)

    @classmethod
    def from_phe(cls, private_key: Any) -> ProverKey:
        p, q = gmpy2.mpz(private_key.p), gmpy2.mpz(private_key.q)
        n = p * q
        return cls(n, n * n, p, q, p * p, q * q, gmpy2.invert(p * p, q * q), q % (p - 1), p % (q - 1))

    def crt(self, xp: Any, xq: Any) -> Any:
        """The element of Z_{N^2} that is xp mod p^2 and xq mod q^2."""
        return xp + self.p2 * ((xq - xp) * self.p2_inv % self.q2)

    def nth_power(self, r: Any) -> Any:
        """r^N mod N^2 = ((r^q mod p)^p mod p^2, (r^p mod q)^q mod q^2): the p-th power modulo p^2 depends only on
        the residue modulo p, and r^q mod p needs the exponent only modulo p - 1."""
        xp = gmpy2.powmod(gmpy2.powmod(r % self.p, self.q_mod, self.p), self.p, self.p2)
        xq = gmpy2.powmod(gmpy2.powmod(r % self.q, self.p_mod, self.q), self.q, self.q2)
        return self.crt(xp, xq)

    def pow(self, base: Any, exponent: Any) -> Any:
        """base^exponent mod N^2 by CRT (short exponents: the challenge parts)."""
        return self.crt(gmpy2.powmod(base, exponent, self.p2), gmpy2.powmod(base, exponent, self.q2))


def random_unit(n: Any) -> Any:
    """Uniform element of Z*_N from :mod:`secrets`."""
    while True:
        r = gmpy2.mpz(secrets.randbelow(int(n) - 1) + 1)
        if gmpy2.gcd(r, n) == 1:
            return r


def encrypt_bit(key: ProverKey, m: int) -> tuple[Any, Any]:
    """(c, r): c = (1 + m N) r^N mod N^2 with r uniform in Z*_N (any m; the proof only exists for 0 and 1)."""
    r = random_unit(key.n)
    return (1 + gmpy2.mpz(m) * key.n) * key.nth_power(r) % key.n2, r


def _bytes(x: Any, width: int) -> bytes:
    return int(x).to_bytes(width, "big")


def challenge(n: Any, c: Any, a0: Any, a1: Any, context: bytes) -> int:
    """Fiat-Shamir challenge: SHA-256 over the domain tag, N, c, both commitments and the context, mod 2^128."""
    w = (int(n).bit_length() + 7) // 8
    h = hashlib.sha256(_DOMAIN + _bytes(n, w) + _bytes(c, 2 * w) + _bytes(a0, 2 * w) + _bytes(a1, 2 * w)
                       + len(context).to_bytes(4, "big") + context)
    return int.from_bytes(h.digest(), "big") & _CHALLENGE_MASK


# ----------------------------------------------------------------------------- the OR proof
@dataclass(frozen=True)
class BitProof:
    """(e_0, e_1, z_0, z_1): the two branch challenges (summing to the hash mod 2^128) and responses in Z*_N."""

    e0: int
    e1: int
    z0: Any
    z1: Any

    def size_bytes(self, n: Any) -> int:
        return 2 * CHALLENGE_BITS // 8 + 2 * ((int(n).bit_length() + 7) // 8)


def _branch_bases(n: Any, n2: Any, c: Any) -> tuple[Any, Any]:
    """(u_0, u_1) = (c, c g^-1 mod N^2) with g^-1 = 1 - N: c encrypts m iff u_m is an N-th residue."""
    return c, c * (1 - n) % n2


def prove_bit(key: ProverKey, c: Any, m: int, r: Any, context: bytes) -> BitProof:
    """Prove that c encrypts 0 or 1, knowing c = g^m r^N (CDS OR of two N-th residuosity Sigma protocols).

    An honest prover has m in {0, 1}; called with anything else it still outputs a transcript (which the verifier
    rejects: the soundness check uses this).
    """
    m = 1 if m == 1 else 0
    u = _branch_bases(key.n, key.n2, c)
    o = 1 - m
    rho = random_unit(key.n)
    a = [gmpy2.mpz(0), gmpy2.mpz(0)]
    a[m] = key.nth_power(rho)
    e_o = secrets.randbits(CHALLENGE_BITS)
    z_o = random_unit(key.n)
    a[o] = key.nth_power(z_o) * key.pow(gmpy2.invert(u[o], key.n2), e_o) % key.n2
    e = challenge(key.n, c, a[0], a[1], context)
    e_m = (e - e_o) & _CHALLENGE_MASK
    z_m = rho * gmpy2.powmod(r, e_m, key.n) % key.n
    return BitProof(e_m, e_o, z_m, z_o) if m == 0 else BitProof(e_o, e_m, z_o, z_m)


def verify_bit(n: Any, c: Any, proof: BitProof, context: bytes) -> bool:
    """Accept iff every part is well formed and e_0 + e_1 = H(N, c, z_0^N u_0^-e_0, z_1^N u_1^-e_1, ctx) mod 2^128."""
    n = gmpy2.mpz(n)
    n2 = n * n
    c = gmpy2.mpz(c)
    if not (0 < c < n2 and gmpy2.gcd(c, n) == 1):
        return False
    for e in (proof.e0, proof.e1):
        if not (isinstance(e, int) and 0 <= e <= _CHALLENGE_MASK):
            return False
    for z in (proof.z0, proof.z1):
        if not (0 < z < n and gmpy2.gcd(z, n) == 1):
            return False
    u0, u1 = _branch_bases(n, n2, c)
    a0 = gmpy2.powmod(proof.z0, n, n2) * gmpy2.powmod(gmpy2.invert(u0, n2), proof.e0, n2) % n2
    a1 = gmpy2.powmod(proof.z1, n, n2) * gmpy2.powmod(gmpy2.invert(u1, n2), proof.e1, n2) % n2
    return (proof.e0 + proof.e1) & _CHALLENGE_MASK == challenge(n, c, a0, a1, context)


def context_of(session: bytes, row: int, col: int, bit: int) -> bytes:
    """What a proof is bound to: the product's session, the value's place and the bit index."""
    return session + row.to_bytes(8, "big") + col.to_bytes(4, "big") + bit.to_bytes(2, "big")


def prove_value(key: ProverKey, value: int, bits: int, session: bytes, row: int, col: int
                ) -> list[tuple[Any, BitProof]]:
    """The encryptor's message for one operand value in [0, 2^bits): a bit ciphertext and its proof per bit."""
    if not 0 <= value < (1 << bits):
        raise ValueError(f"value {value} is outside [0, 2^{bits})")
    out = []
    for t in range(bits):
        m = (value >> t) & 1
        c, r = encrypt_bit(key, m)
        out.append((c, prove_bit(key, c, m, r, context_of(session, row, col, t))))
    return out


# ----------------------------------------------------------------------------- the responder's side
def assemble_value(n2: Any, bit_cts: list[Any]) -> Any:
    """Enc(sum_t bit_t 2^t) = prod_t c_t^(2^t) mod N^2 (Horner from the top bit: squarings and products)."""
    acc = gmpy2.mpz(bit_cts[-1])
    for c in reversed(bit_cts[:-1]):
        acc = acc * acc % n2 * c % n2
    return acc


def pack_ciphertexts(n2: Any, value_cts: list[Any], slot_bits: int) -> Any:
    """Enc(sum_j a'_j 2^(w j)) = prod_j Enc(a'_j)^(2^(w j)) (Horner from the top slot: w squarings per slot)."""
    acc = gmpy2.mpz(value_cts[-1])
    for c in reversed(value_cts[:-1]):
        for _ in range(slot_bits):
            acc = acc * acc % n2
        acc = acc * c % n2
    return acc


def verify_and_assemble_row(n: Any, message: list[list[tuple[Any, BitProof]]], session: bytes, row: int,
                            slot_bits: int) -> Any:
    """Responder: verify every bit proof of a row's values, then build the row's packed operand ciphertext."""
    n = gmpy2.mpz(n)
    n2 = n * n
    value_cts = []
    for col, bits in enumerate(message):
        for t, (c, proof) in enumerate(bits):
            if not verify_bit(n, c, proof, context_of(session, row, col, t)):
                raise ValueError(f"bit proof {t} of value ({row}, {col}) rejected")
        value_cts.append(assemble_value(n2, [c for c, _ in bits]))
    return pack_ciphertexts(n2, value_cts, slot_bits)


# ----------------------------------------------------------------------------- checks and measurements
def soundness(key: ProverKey, private_key: Any) -> dict[str, bool]:
    """Honest proofs verify and decrypt right; a ciphertext of 2, tampered, moved and replayed proofs fail."""
    ctx, other = context_of(b"s" * 16, 3, 1, 7), context_of(b"s" * 16, 3, 1, 8)
    out: dict[str, bool] = {}
    proofs = {}
    for m in (0, 1):
        c, r = encrypt_bit(key, m)
        proofs[m] = (c, prove_bit(key, c, m, r, ctx))
        out[f"bit {m} accepted"] = verify_bit(key.n, *proofs[m], ctx) and private_key.raw_decrypt(int(c)) == m
    c2, r2 = encrypt_bit(key, 2)
    out["ciphertext of 2 rejected (prover claims 0)"] = not verify_bit(key.n, c2, prove_bit(key, c2, 0, r2, ctx), ctx)
    out["ciphertext of 2 rejected (prover claims 1)"] = not verify_bit(key.n, c2, prove_bit(key, c2, 1, r2, ctx), ctx)
    c, pr = proofs[1]
    out["tampered z_0 rejected"] = not verify_bit(key.n, c, BitProof(pr.e0, pr.e1, pr.z0 * 2 % key.n, pr.z1), ctx)
    out["tampered e_0 rejected"] = not verify_bit(key.n, c, BitProof(pr.e0 ^ 1, pr.e1, pr.z0, pr.z1), ctx)
    out["challenges shifted between branches rejected"] = not verify_bit(
        key.n, c, BitProof((pr.e0 + 1) & _CHALLENGE_MASK, (pr.e1 - 1) & _CHALLENGE_MASK, pr.z0, pr.z1), ctx)
    out["proof moved to another ciphertext rejected"] = not verify_bit(key.n, proofs[0][0], pr, ctx)
    out["proof replayed in another context rejected"] = not verify_bit(key.n, c, pr, other)
    value = (1 << VALUE_BITS) - 3
    message = [prove_value(key, value, VALUE_BITS, b"s" * 16, 0, 0)]
    packed = verify_and_assemble_row(key.n, message, b"s" * 16, 0, 123)
    out["assembled operand decrypts to the value"] = private_key.raw_decrypt(int(packed)) == value
    return out


def cpu_seconds() -> float:
    """CPU seconds of this process and its waited-for children (user + system)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def per_item(fn: Any, items: int, batches: int) -> float:
    """Median over ``batches`` of the CPU seconds per item of a batch of ``items`` calls ``fn(i)``."""
    values = []
    for _ in range(batches):
        t0 = cpu_seconds()
        for i in range(items):
            fn(i)
        values.append((cpu_seconds() - t0) / items)
    return statistics.median(values)


def unit_costs(key: ProverKey, proofs: int, batches: int, slot_bits: dict[int, int]) -> dict[str, Any]:
    """CPU seconds per bit encryption, per proof (prover), per verification, per assembled row, per full
    exponentiation modulo N^2 (yardstick)."""
    bits = [secrets.randbits(1) for _ in range(proofs)]
    encs = [encrypt_bit(key, m) for m in bits]
    made = [prove_bit(key, c, m, r, context_of(b"u" * 16, i, 0, 0)) for i, ((c, r), m) in enumerate(zip(encs, bits,
                                                                                                      strict=True))]
    out: dict[str, Any] = {
        "encrypt_bit": per_item(lambda i: encrypt_bit(key, bits[i]), proofs, batches),
        "prove_bit": per_item(lambda i: prove_bit(key, encs[i][0], bits[i], encs[i][1],
                                                  context_of(b"u" * 16, i, 0, 0)), proofs, batches),
        "verify_bit": per_item(lambda i: verify_bit(key.n, encs[i][0], made[i], context_of(b"u" * 16, i, 0, 0)),
                               proofs, batches),
        "full_exponentiation_mod_n2": per_item(lambda i: gmpy2.powmod(made[i].z0, key.n, key.n2), proofs, batches),
        "bit_ciphertext_bytes": 2 * ((int(key.n).bit_length() + 7) // 8),
        "proof_bytes": made[0].size_bytes(key.n),
        "assemble_row": {},
    }
    cts = [c for c, _ in encs]
    for d_enc, w in slot_bits.items():
        rows = [[cts[(j * VALUE_BITS + t) % proofs] for t in range(VALUE_BITS)] for j in range(d_enc)]
        out["assemble_row"][str(d_enc)] = per_item(
            lambda _i, rows=rows, w=w: pack_ciphertexts(key.n2, [assemble_value(key.n2, b) for b in rows], w),
            4, batches)
    return out


def one_row_end_to_end(key: ProverKey, d_enc: int, slot_bits: int) -> dict[str, float]:
    """One whole row of d_enc values proved, verified and assembled: CPU of each side (checks the extrapolation)."""
    values = [secrets.randbelow(1 << VALUE_BITS) for _ in range(d_enc)]
    t0 = cpu_seconds()
    message = [prove_value(key, v, VALUE_BITS, b"r" * 16, 0, j) for j, v in enumerate(values)]
    t1 = cpu_seconds()
    verify_and_assemble_row(key.n, message, b"r" * 16, 0, slot_bits)
    return {"prover": t1 - t0, "verifier": cpu_seconds() - t1}


def product_cpu(n: int, d_enc: int, d_resp: int, keypair: tuple, seed: int) -> dict[str, float]:
    """CPU and wall seconds of one secure product A^T B (uniform [-1, 1] data, 2048-bit key, workers=1)."""
    rng = np.random.default_rng(seed)
    A, B = rng.uniform(-1.0, 1.0, (n, d_enc)), rng.uniform(-1.0, 1.0, (n, d_resp))
    t0, w0 = cpu_seconds(), time.perf_counter()
    got = secure_gram(A, B, keypair=keypair, encryptor="a", workers=1)
    cpu, wall = cpu_seconds() - t0, time.perf_counter() - w0
    error = float(np.max(np.abs(got - A.T @ B)))
    return {"cpu_seconds": cpu, "wall_seconds": wall, "max_abs_error": error, "measured": True}


def totals(n: int, d_enc: int, unit: dict[str, Any], product: dict[str, Any]) -> dict[str, Any]:
    """The proofs' cost at one shape from the measured unit costs, next to the product's CPU."""
    values = n * d_enc
    proofs = values * VALUE_BITS
    prover = proofs * (unit["encrypt_bit"] + unit["prove_bit"])
    verifier = proofs * unit["verify_bit"] + n * unit["assemble_row"][str(d_enc)]
    yardstick = values * unit["full_exponentiation_mod_n2"]
    return {
        "values": values, "bits_per_value": VALUE_BITS, "proofs": proofs,
        "prover_cpu_seconds": prover, "verifier_cpu_seconds": verifier, "total_cpu_seconds": prover + verifier,
        "product_cpu_seconds": product["cpu_seconds"], "product_measured": product["measured"],
        "ratio_to_product": (prover + verifier) / product["cpu_seconds"],
        "one_exponentiation_per_value_cpu_seconds": yardstick,
        "one_exponentiation_per_value_ratio": yardstick / product["cpu_seconds"],
        "proof_bytes": proofs * (unit["bit_ciphertext_bytes"] + unit["proof_bytes"]),
        "product_request_bytes": n * unit["bit_ciphertext_bytes"],   # one packed ciphertext per row (d_enc <= 16)
    }


def print_summary(result: dict[str, Any]) -> None:
    u = result["unit_costs"]
    print(f"per bit proof (2048-bit key, {VALUE_BITS} bits per value): encrypt {u['encrypt_bit'] * 1e3:.2f} ms, "
          f"prove {u['prove_bit'] * 1e3:.2f} ms, verify {u['verify_bit'] * 1e3:.2f} ms CPU; one full "
          f"exponentiation mod N^2 {u['full_exponentiation_mod_n2'] * 1e3:.2f} ms")
    print(f"{'shape':<14} {'proofs':>9} {'prover CPU s':>13} {'verifier CPU s':>15} {'product CPU s':>14} "
          f"{'ratio':>8} {'1-exp ratio':>11}")
    for name, t in result["shapes"].items():
        print(f"{name:<14} {t['proofs']:>9} {t['prover_cpu_seconds']:>13.4g} {t['verifier_cpu_seconds']:>15.4g} "
              f"{t['product_cpu_seconds']:>14.4g} {t['ratio_to_product']:>8.0f} "
              f"{t['one_exponentiation_per_value_ratio']:>11.1f}")
    row = result["one_row"]
    print(f"one forest row end to end: prover {row['prover']:.2f} s, verifier {row['verifier']:.2f} s CPU "
          f"(predicted {row['predicted_prover']:.2f} / {row['predicted_verifier']:.2f})")
    print("soundness: " + ", ".join(f"{k}: {v}" for k, v in result["soundness"].items()))
    verdict = "ship as an option" if result["max_ratio"] <= 3 else "record, do not ship (> 3x the product)"
    print(f"ratio proofs / product: {result['max_ratio']:.0f}x at most -> {verdict}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--proofs", type=int, default=48, help="proofs per timing batch (3 batches, median)")
    ap.add_argument("--large-product", choices=("run", "extrapolate"), default="run",
                    help="run the 10^5 x 10 x 10 product, or scale the forest product's CPU per row")
    ap.add_argument("--out", type=Path, default=None, help="write the JSON here")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    keypair = generate_keypair(2048)
    key = ProverKey.from_phe(keypair[1])
    shapes = {"forest 517x13x14": (517, 13, 14), "1e5x10x10": (100_000, 10, 10)}
    slot_bits = {d_enc: SlotLayout(key_bits=2048, n_rows=n, precision_bits=P, value_bound=1.0,
                                   noise_bits=default_noise_bits(P)).slot_bits for n, d_enc, _ in shapes.values()}
    result: dict[str, Any] = {"command": "python benchmarks/range_proofs.py " + " ".join(argv or sys.argv[1:]),
                              "key_bits": int(key.n).bit_length(), "challenge_bits": CHALLENGE_BITS,
                              "precision_bits": P, "bits_per_value": VALUE_BITS,
                              "soundness": soundness(key, keypair[1])}
    if not all(result["soundness"].values()):
        print("soundness check FAILED", result["soundness"], file=sys.stderr)
        return 1
    unit = result["unit_costs"] = unit_costs(key, args.proofs, 3, slot_bits)
    row = result["one_row"] = one_row_end_to_end(key, 13, slot_bits[13])
    row["predicted_prover"] = 13 * VALUE_BITS * (unit["encrypt_bit"] + unit["prove_bit"])
    row["predicted_verifier"] = 13 * VALUE_BITS * unit["verify_bit"] + unit["assemble_row"]["13"]
    forest = product_cpu(517, 13, 14, keypair, 1)
    if args.large_product == "run":
        large = product_cpu(100_000, 10, 10, keypair, 2)
    else:
        large = {"cpu_seconds": forest["cpu_seconds"] / 517 * 100_000, "measured": False}
    result["products"] = {"forest 517x13x14": forest, "1e5x10x10": large}
    result["shapes"] = {name: totals(n, d_enc, unit, result["products"][name])
                        for name, (n, d_enc, _) in shapes.items()}
    result["max_ratio"] = max(t["ratio_to_product"] for t in result["shapes"].values())
    result["min_one_exponentiation_ratio"] = min(t["one_exponentiation_per_value_ratio"]
                                                 for t in result["shapes"].values())
    result["ship"] = result["max_ratio"] <= 3.0
    result["wall_seconds"] = time.perf_counter() - t0
    print_summary(result)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
