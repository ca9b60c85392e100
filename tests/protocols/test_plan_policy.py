"""Issue 14, item 1 (party side): the local policy a party applies to every PLAN (pure checks, no sockets)."""

from __future__ import annotations

import pytest

from vfl.exceptions import ConfigurationError
from vfl.protocols.policy import DEFAULT_MECHANISMS, PartyPolicy, check_plan, describe_plan


def _plan(mechanism="gaussian-fm", epsilon=1.0, delta=1e-5, key_bits=2048, counts=(3, 2), index=1):
    return {"index": index, "model": "linear", "mechanism": mechanism, "n_samples": 100, "label_owner": 0,
            "params": {"epsilon": epsilon, "delta": delta, "key_bits": key_bits},
            "parties": [{"name": "alice", "n_features": counts[0], "label_owner": True},
                        {"name": "bob", "n_features": counts[1], "label_owner": False}]}


def test_default_policy_accepts_a_dp_plan_and_describes_it():
    summary = check_plan(_plan(), PartyPolicy(), name="bob", n_rows=100)
    line = describe_plan(summary)
    assert line == ("plan: gaussian-fm (epsilon 1, delta 1e-05), linear model, parties alice (3 cols, label), "
                    "bob (2 cols), 2048-bit keys")
    assert not hasattr(PartyPolicy(), "max_exposed_rows")   # issue 20: no exposure bound, the roster is signed


def test_the_plan_line_names_the_intercept_column():
    """Issue 32: the label owner's count includes the public constant column; the line says so instead of a 17th
    column after "16 features"."""
    plan = _plan()
    plan["parties"][0]["intercept"] = True
    line = describe_plan(check_plan(plan, PartyPolicy(), name="bob", n_rows=100))
    assert "parties alice (2 cols + intercept, label), bob (2 cols)" in line
    plan["parties"][0]["n_features"] = 1   # an intercept alone
    assert "alice (0 cols + intercept, label)" in describe_plan(check_plan(plan, PartyPolicy(), name="bob", n_rows=100))


@pytest.mark.parametrize("mechanism", ["none", "bcd"])
def test_unprotected_mechanisms_need_an_explicit_opt_in(mechanism):
    with pytest.raises(ConfigurationError, match=f"refuses mechanism '{mechanism}'.*adds no noise.*--allow-mech"):
        check_plan(_plan(mechanism, epsilon=None), PartyPolicy(), name="bob", n_rows=100)
    opted = PartyPolicy.from_options(allow_mechanisms=f"gaussian-fm,{mechanism}")
    assert "NO noise" in describe_plan(check_plan(_plan(mechanism, epsilon=None), opted, name="bob", n_rows=100))
    assert mechanism not in DEFAULT_MECHANISMS


def test_epsilon_range_uses_the_true_epsilon():
    with pytest.raises(ConfigurationError, match="refuses epsilon 50.*--max-epsilon"):
        check_plan(_plan(epsilon=50.0), PartyPolicy(), name="bob", n_rows=100)
    with pytest.raises(ConfigurationError, match=r"refuses epsilon 12 \(true epsilon"):   # nominal 2, paper-mode 12
        check_plan(_plan(epsilon=2.0), PartyPolicy(), name="bob", n_rows=100, true_epsilon=12.0)
    with pytest.raises(ConfigurationError, match="below its minimum 0.5"):
        check_plan(_plan(epsilon=0.1), PartyPolicy(min_epsilon=0.5), name="bob", n_rows=100)
    with pytest.raises(ConfigurationError, match="refuses delta 0.5"):
        check_plan(_plan(delta=0.5), PartyPolicy(), name="bob", n_rows=100)
    assert check_plan(_plan(epsilon=1e6), PartyPolicy.permissive(), name="bob", n_rows=100).epsilon == 1e6


def test_shape_and_identity_checks():
    with pytest.raises(ConfigurationError, match="columns for 100 rows"):   # the echo-attack plan: d_resp = N
        check_plan(_plan(counts=(100, 2)), PartyPolicy(), name="bob", n_rows=100)
    with pytest.raises(ConfigurationError, match="does not describe this party"):
        check_plan(_plan(index=0), PartyPolicy(), name="bob", n_rows=100)
    with pytest.raises(ConfigurationError, match="65536-bit keys"):
        check_plan(_plan(key_bits=65536), PartyPolicy(), name="bob", n_rows=100)


@pytest.mark.parametrize("kwargs,text", [({"allow_mechanisms": "magic"}, "unknown mechanism"),
                                         ({"allow_mechanisms": ","}, "at least one"),
                                         ({"min_epsilon": 2.0, "max_epsilon": 1.0}, "exceeds"),
                                         ({"max_delta": 1.5}, "--max-delta")])
def test_bad_policy_options_are_configuration_errors(kwargs, text):
    with pytest.raises(ConfigurationError, match=text):
        PartyPolicy.from_options(**kwargs)


def test_party_count_is_bounded():
    """Invented parties are refused by the signed roster (tests/protocols/test_roster.py); the policy only bounds
    the size of a plan."""
    many = _plan()
    many["parties"] = many["parties"] + [{"name": f"g{i}", "n_features": 1} for i in range(1000)]
    with pytest.raises(ConfigurationError, match="lists 1002 parties"):
        check_plan(many, PartyPolicy(), name="bob", n_rows=100)


def test_the_plan_line_says_when_the_label_owner_releases_yty():
    """Issue 31: every party's operator sees that the plan releases beta = (1/N) y'y (``release_beta``)."""
    plan = _plan()
    plan["params"]["release_beta"] = True
    assert describe_plan(check_plan(plan, PartyPolicy(), name="bob", n_rows=100)).endswith(
        "2048-bit keys, the label owner also releases y'y (noised)")
    plan["model"] = "logistic"   # no beta in a logistic plan: nothing to say
    assert "y'y" not in describe_plan(check_plan(plan, PartyPolicy(), name="bob", n_rows=100))
