"""Option bundles shared by several ``vfl`` commands, declared once (as pip's ``cli/cmdoptions.py``), and the small
helpers they need (the member's ledger, the site's identity rule, the output line)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

from vfl.protocols.policy import DEFAULT_MAX_DELTA as DEFAULT_PLAN_MAX_DELTA
from vfl.protocols.policy import DEFAULT_MAX_EPSILON as DEFAULT_PLAN_MAX_EPSILON

__all__ = ["TEST_NOISE_MODES", "echo", "hub_options", "member_ledger_options", "member_link_options",
           "open_member_ledger", "require_site_identity", "site_identity_options", "site_policy_options"]

TEST_NOISE_MODES = ("none", "zero-sum-only")   # --insecure-test-noise of the capeFM hub and sites


def echo(text: str) -> None:
    click.echo(text, err=False)


def _apply(options: list[Callable], command: Callable) -> Callable:
    for option in reversed(options):
        command = option(command)
    return command


def hub_options(*, members: str, member: str) -> Callable[[Callable], Callable]:
    """``--bind``, ``--timeout``, ``--max-run-time``, ``--curve-dir``, ``--allow-plaintext-public`` of a hub that
    members register with (``vfl coordinator``, ``vfl aggregator``, ``vfl djica-aggregator``): one help text for
    all of them, naming the hub's MEMBERS (plural) and MEMBER (singular)."""
    options = [
        click.option("--bind", default="tcp://127.0.0.1:5555", show_default=True,
                     help="ZeroMQ endpoint to listen on (use tcp://0.0.0.0:PORT for other machines, with CURVE)."),
        click.option("--timeout", type=float, default=120.0, show_default=True,
                     help=f"Seconds to wait for registrations, and the longest a {member} may stay silent (a silent "
                          f"{member} aborts the run, no model written)."),
        click.option("--max-run-time", type=float, default=86400.0, show_default=True,
                     help=f"Seconds after which the whole run is aborted (no model written) even if every {member} "
                          "still sends heartbeats."),
        click.option("--curve-dir", type=click.Path(file_okay=False), default=None,
                     help=f"Enable CURVE: directory with coordinator.key_secret and the allowed {members}' *.key "
                          "files."),
        click.option("--allow-plaintext-public", is_flag=True,
                     help="Listen on a non-loopback --bind WITHOUT CURVE (refused otherwise: anyone who reaches the "
                          "interface could read and inject the run's messages). Only on a network you trust."),
    ]
    return lambda command: _apply(options, command)


def member_link_options(*, hub: str) -> Callable[[Callable], Callable]:
    """``--curve-dir`` and ``--timeout`` of a member that connects to a HUB (``vfl party``, ``vfl site``,
    ``vfl djica-site``): one help text for all of them."""
    options = [
        click.option("--curve-dir", type=click.Path(file_okay=False), default=None,
                     help="CURVE keys: directory with NAME.key_secret and coordinator.key."),
        click.option("--timeout", type=float, default=120.0, show_default=True,
                     help=f"Give up when the {hub} is silent this many seconds."),
    ]
    return lambda command: _apply(options, command)


def member_ledger_options(command: Callable) -> Callable:
    """``--ledger``, ``--budget``, ``--dataset-name``: a member's privacy ledger (``vfl party``, ``vfl site``,
    ``vfl djica-site``; vfl.privacy.budget_guard.BudgetGuard)."""
    options = [
        click.option("--ledger", "ledger_path", type=click.Path(dir_okay=False), default=None,
                     help="This member's privacy ledger (SQLite): every run's spend per dataset. Default: "
                          "ledger-NAME.sqlite in $VFL_LEDGER or the user's data directory (~/.local/share/vfl)."),
        click.option("--budget", default=None, metavar="EPSILON[,DELTA]",
                     help="Lifetime privacy budget (delta default 1e-5): a plan whose spend, composed with the "
                          "ledger's history, would exceed it is refused when it arrives, before this member sends "
                          "anything for it (a refused plan costs nothing)."),
        click.option("--dataset-name", default=None,
                     help="Keep a separate budget for a separate dataset, declared by this name (recorded with its "
                          "files and columns). Default: one budget for every run of this member, whatever the rows, "
                          "bounds, label or --id subset."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def open_member_ledger(name: str, ledger_path: str | None, budget: Any) -> tuple[Any, Any]:
    """A party's or site's privacy ledger (``--ledger``, default: that of NAME; checked: one line and exit 1 if
    unreadable or corrupted) and its lifetime budget (``--budget``, None: record only)."""
    from vfl.privacy.ledger import Budget, Ledger, default_ledger_path

    lifetime = Budget.parse(budget) if budget else None
    ledger = Ledger(ledger_path or default_ledger_path(name), party=name)
    ctx = click.get_current_context(silent=True)
    if ctx is not None:   # a start that fails before the first reservation leaves no empty ledger file
        ctx.call_on_close(ledger.discard_if_unused)
    return ledger, lifetime


def site_identity_options(command: Callable) -> Callable:
    """``--identity-dir`` and ``--insecure-no-identity`` of a CAPE site, as ``vfl party``'s (cape_keys)."""
    options = [
        click.option("--identity-dir", type=click.Path(file_okay=False), default=None,
                     help="Signing identities (`vfl keys`): this site's NAME.sign.secret and the pinned NAME.sign.pub "
                          "of every co-site it accepts. The site signs its Diffie-Hellman values and masks its noise "
                          "share only under values signed by the pinned identities of the plan's sites for this run "
                          "and round; a plan with a site not pinned here is refused. Required unless "
                          "--insecure-no-identity."),
        click.option("--insecure-no-identity", is_flag=True,
                     help="Run WITHOUT signing identities (loopback experiments only): a hostile aggregator could "
                          "then substitute the co-sites' Diffie-Hellman values and unmask this site's noise share. "
                          "Warns, and the model's report says so."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def require_site_identity(name: str, identity_dir: str | None, insecure_no_identity: bool) -> None:
    """A site without --identity-dir refuses to start (before reading its data) unless --insecure-no-identity."""
    from vfl.net.site import require_site_identity

    require_site_identity(name, identity_dir, insecure_no_identity)


def site_policy_options(command: Callable) -> Callable:
    """``--max-epsilon``, ``--max-delta``, ``--min-colluders``: what a CAPE site agrees to run (SitePolicy)."""
    options = [
        click.option("--max-epsilon", type=float, default=DEFAULT_PLAN_MAX_EPSILON, show_default=True,
                     help="Refuse a plan whose TRUE epsilon (all planned rounds; the paper calibration's larger "
                          "value) is above this, before anything is computed or released."),
        click.option("--max-delta", type=float, default=DEFAULT_PLAN_MAX_DELTA, show_default=True,
                     help="Refuse a plan whose delta is above this."),
        click.option("--min-colluders", type=click.IntRange(min=0), default=0, show_default=True,
                     help="Refuse a plan whose noise withstands fewer colluding sites (S_C) than this."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def emit(text: str) -> None:
    """One line to stdout, flushed at once (a role's progress lines reach a pipe or a log as they happen)."""
    click.echo(text)
    sys.stdout.flush()
