"""``vfl budget show|history|export``: read a member's privacy ledger (docs/privacy.md)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from vfl.cli.options import echo
from vfl.data.files import check_writable
from vfl.exceptions import ConfigurationError

__all__ = ["budget"]


# ---------------------------------------------------------------------------------------------- budget
@click.group()
def budget() -> None:
    """A party's privacy ledger: what each dataset has spent, its runs (docs/privacy.md)."""


def _ledger_options(command: Callable) -> Callable:
    options = [
        click.option("--ledger", "ledger_path", type=click.Path(dir_okay=False), default=None,
                     help="The ledger file (default: that of --name in $VFL_LEDGER or the user's data directory)."),
        click.option("--name", default=None, help="The party whose default ledger to read."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _read_ledger(ledger_path: str | None, name: str | None) -> Any:
    from vfl.privacy.ledger import Ledger, default_ledger_path

    if not ledger_path and not name:
        raise ConfigurationError("give --ledger PATH or --name NAME (the party whose default ledger to read)")
    return Ledger(ledger_path or default_ledger_path(name), create=False)  # type: ignore[arg-type]


@budget.command("show")
@_ledger_options
@click.option("--budget", "lifetime", default=None, metavar="EPSILON[,DELTA]",
              help="Show what is left of this budget (default: the one in force at each dataset's latest run).")
@click.option("--json", "as_json", is_flag=True, help="JSON instead of a table.")
def budget_show(ledger_path: str | None, name: str | None, lifetime: str | None, as_json: bool) -> None:
    """Per dataset: runs, composed spend, budget and what is left."""
    import json

    from vfl.privacy.ledger import Budget
    from vfl.privacy.ledger_tables import summary_table

    ledger = _read_ledger(ledger_path, name)
    b = Budget.parse(lifetime) if lifetime else None
    echo(json.dumps(ledger.summary(b), indent=2) if as_json else summary_table(ledger, b))


@budget.command("history")
@_ledger_options
@click.option("--json", "as_json", is_flag=True, help="JSON instead of a table.")
def budget_history(ledger_path: str | None, name: str | None, as_json: bool) -> None:
    """Every run, oldest first: when, dataset, mechanism, epsilon, delta, state, coordinator."""
    import json

    from vfl.privacy.ledger_tables import history_table

    ledger = _read_ledger(ledger_path, name)
    echo(json.dumps([r.to_dict() for r in ledger.runs()], indent=2) if as_json else history_table(ledger))


@budget.command("export")
@_ledger_options
@click.option("--out", default=None, type=click.Path(dir_okay=False), help="Write the JSON here (default: stdout).")
@click.option("--force", is_flag=True, help="Overwrite an existing --out file.")
def budget_export(ledger_path: str | None, name: str | None, out: str | None, force: bool) -> None:
    """The whole ledger as JSON: per dataset spent/left, every run, the integrity chain's head."""
    import json

    from vfl.privacy.ledger_tables import export_document

    ledger = _read_ledger(ledger_path, name)
    text = json.dumps(export_document(ledger), indent=2)
    if out is None:
        echo(text)
        return
    check_writable(out, force=force)
    Path(out).write_text(text + "\n", encoding="utf-8")
