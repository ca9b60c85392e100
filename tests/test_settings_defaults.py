"""Settings in one room (issue 30): ``vfl.fit``, the CLI options and the settings dataclasses agree on every default,
and the checks declared as data (vfl.validation) give one readable line naming the option."""

from __future__ import annotations

import dataclasses
import inspect
import math
from numbers import Integral, Real
from typing import Any

import click
import pytest

import vfl
from vfl.cli.cape import aggregator as cape_aggregator_command
from vfl.cli.cape import djica_aggregator
from vfl.cli.coordinator import coordinator
from vfl.exceptions import ConfigurationError
from vfl.models.cape_ica import CapeICAConfig
from vfl.protocols.settings import RUN_LIMITS, CapeICASettings, CapeSettings, RunSettings
from vfl.validation import Interval, Options, check_param

# a CLI option -> the settings field it sets (same name unless listed); fields no CLI option sets are listed apart
CLI_NAMES = {"parties": "n_parties", "sites": "n_sites", "max_run_time": "max_run_seconds",
             "insecure_test_keys": "allow_insecure_keys", "colluding": "n_colluders", "site_weights": "weights",
             "insecure_test_noise": "noise", "rounds": "max_iter", "components": "n_components"}
#: CLI defaults that differ on purpose, each with its reason
CLI_DIFFERS = {
    ("coordinator", "n_parties"): "required unless --sites (cape-fm): no default count of parties",
    ("coordinator", "epsilon"): "None on the CLI: the mechanism decides (none/bcd take no epsilon), 1.0 when unset",
    ("aggregator", "epsilon"): "None on the CLI, which then refuses the run: capeFM needs --epsilon",
    ("aggregator", "noise"): "--insecure-test-noise unset means full noise",
    ("aggregator", "calibration"): "None on the CLI: analytic unless --calibration paper",
    ("djica-aggregator", "noise"): "--insecure-test-noise unset means the CAPE noise",
}


def _defaults(cls: type) -> dict[str, Any]:
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def _signature_defaults(func: Any) -> dict[str, Any]:
    return {n: p.default for n, p in inspect.signature(func).parameters.items()
            if p.default is not inspect.Parameter.empty}


def _cli_defaults(command: click.Command) -> dict[str, Any]:
    ctx = click.Context(command)   # get_default: a flag's unset default is False
    return {CLI_NAMES.get(p.name, p.name): p.get_default(ctx) for p in command.params
            if p.name is not None and not p.required}   # a required option has no default to compare


def test_every_settings_class_is_keyword_only():
    for cls in (RunSettings, CapeSettings, CapeICASettings):
        assert all(f.kw_only for f in dataclasses.fields(cls)), cls
        with pytest.raises(TypeError):
            cls(2)


def test_vfl_fit_restates_every_run_setting_with_its_default():
    settings, fit = _defaults(RunSettings), _signature_defaults(vfl.fit)
    shared = set(settings) - {"mechanism_options"}   # fit's **mechanism_options
    assert shared <= set(fit), shared - set(fit)
    assert {k: fit[k] for k in shared} == {k: settings[k] for k in shared}


def test_vfl_fit_sites_and_fit_ica_sites_agree_with_their_settings():
    fit, cape = _signature_defaults(vfl.fit_sites), _defaults(CapeSettings)
    shared = set(fit) & set(cape)
    assert {"model", "epsilon", "delta", "n_colluders", "calibration", "weights", "fit_intercept", "lambda_floor",
            "timeout", "max_run_seconds"} <= shared
    assert {k: fit[k] for k in shared} == {k: cape[k] for k in shared}
    ica_fit, ica_cfg, ica = _signature_defaults(vfl.fit_ica_sites), _defaults(CapeICAConfig), _defaults(CapeICASettings)
    both = set(ica_fit) & set(ica_cfg) - {"noise"}   # fit_ica_sites spells the test switch insecure_test_noise
    assert len(both) >= 10 and {k: ica_fit[k] for k in both} == {k: ica_cfg[k] for k in both}
    assert {k: ica_fit[k] for k in RUN_LIMITS} == {k: ica[k] for k in RUN_LIMITS}


@pytest.mark.parametrize("name, command, cls", [("coordinator", coordinator, RunSettings),
                                                ("aggregator", cape_aggregator_command, CapeSettings),
                                                ("djica-aggregator", djica_aggregator, CapeICAConfig),
                                                ("djica-aggregator", djica_aggregator, CapeICASettings)])
def test_the_cli_options_agree_with_the_settings(name, command, cls):
    cli, settings = _cli_defaults(command), _defaults(cls)
    shared = set(cli) & set(settings)
    assert len(shared) >= 2, shared
    differ = {k: (cli[k], settings[k]) for k in shared if cli[k] != settings[k] and (name, k) not in CLI_DIFFERS}
    assert not differ, f"vfl {name}: CLI default != settings default: {differ}"


def test_the_documented_differences_are_real():
    """Each listed exception still differs (a stale entry would hide a real disagreement)."""
    commands = {"coordinator": (coordinator, RunSettings), "aggregator": (cape_aggregator_command, CapeSettings),
                "djica-aggregator": (djica_aggregator, CapeICAConfig)}
    for (name, field), _why in CLI_DIFFERS.items():
        command, cls = commands[name]
        cli, settings = _cli_defaults(command), _defaults(cls)
        assert field in cli and cli[field] != settings.get(field, object()), (name, field)


@pytest.mark.parametrize("cls, base", [(RunSettings, {"n_parties": 2}),
                                       (CapeSettings, {"n_sites": 2}),
                                       (CapeICASettings, {"n_sites": 2, "config": CapeICAConfig(2, 1.0)})])
def test_each_declared_constraint_refuses_a_value_outside_it_with_one_line(cls, base):
    """Values generated from the constraints themselves (sklearn's invalid-value tests): just outside each bound,
    a bool, a string; every refusal is one ConfigurationError line naming the option."""
    names = getattr(cls, "_option_names", {})
    for field, constraints in cls._parameter_constraints.items():
        for bad in _invalid_values(constraints):
            with pytest.raises(ConfigurationError) as info:
                cls(**{**base, **ONLY_CHECKED_WITH.get(field, {}), field: bad}).validate()
            line = str(info.value)
            assert "\n" not in line and names.get(field, field) in line and "must be" in line, (field, bad, line)


#: fields checked for one family only (RunSettings: rounds for (DP-)BCD runs)
ONLY_CHECKED_WITH = {"rounds": {"mechanism": "bcd"}}


def _invalid_values(constraints: list) -> list[Any]:
    out: list[Any] = [True, "x"]
    for c in constraints:
        if isinstance(c, Interval):
            step = 1 if issubclass(c.kind, Integral) else 1e-9
            if c.left is not None:
                out.append(c.left - step if c.closed in ("both", "left") else c.left)
            if c.right is not None:
                out.append(c.right + step if c.closed in ("both", "right") else c.right)
            if not issubclass(c.kind, Integral):
                out.append(math.nan)
    return out


def test_interval_and_options_describe_what_they_accept():
    assert str(Interval(int, 1, 1000)) == "an integer in [1, 1000]"
    assert str(Interval(int, 1, None, closed="left")) == "an integer >= 1"
    assert str(Interval(Real, 0, None, closed="neither", unit="seconds")) == "a positive number of seconds"
    assert str(Interval(Real, 0, None, closed="left")) == "a finite number >= 0"
    assert str(Interval(Real, 1, None, closed="neither")) == "a number > 1"
    assert str(Options(("a", "b"))) == "one of a, b"
    assert check_param("--x", None, [None, Interval(int, 1, 2)]) is None
    with pytest.raises(ConfigurationError, match=r"^--x must be an integer in \[1, 2\], got 3$"):
        check_param("--x", 3, [None, Interval(int, 1, 2)])
    with pytest.raises(ConfigurationError, match="got True"):
        check_param("--x", True, [Interval(int, 0, 2)])
    with pytest.raises(ConfigurationError, match="got nan"):
        check_param("--t", math.nan, [Interval(Real, 0, None, closed="neither")])
