"""``vfl plan`` (the epsilon planner) and ``vfl report`` (a released model in words and figures), issue 31.
Registered on the ``vfl`` group by :mod:`vfl.cli`; the logic lives in :mod:`vfl.models.planner` and
:mod:`vfl.models.report`, imported inside the commands so ``vfl --help`` stays fast."""

from __future__ import annotations

import json

import click

from vfl.exceptions import ConfigurationError

__all__ = ["plan", "report"]


def _numbers(text: str, what: str, kind: type = float) -> list:
    try:
        values = [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigurationError(f"{what} must be comma-separated numbers, got {text!r}") from None
    if not values:
        raise ConfigurationError(f"{what} is empty")
    return values


def _plan_bounds(bounds: str | None, party_columns: list[int]) -> tuple[list | None, list[str] | None, tuple | None,
                                                                          int]:
    """Columns' bounds and names, the label's bounds and the label owner from bounds files, one per party
    (``vfl party --bounds`` files; the label owner's holds the label's bounds too); the label owner is the party
    whose file has one entry more than its columns."""
    if bounds is None:
        return None, None, None, 0
    from vfl.data.config import load_bounds_file

    files = [b for b in bounds.split(",") if b.strip()]
    if len(files) != len(party_columns):
        raise ConfigurationError(f"--bounds: {len(files)} file(s) for {len(party_columns)} parties (one per party, "
                                 "in --party-columns order)")
    cols, names, label, owner = [], [], None, 0
    for k, (path, count) in enumerate(zip(files, party_columns, strict=True)):
        table = load_bounds_file(path)
        items = list(table.items())
        if len(items) == count + 1:
            if label is not None:
                raise ConfigurationError("--bounds: two files hold one entry more than their party's columns (the "
                                         "label's bounds belong in the label owner's file only)")
            (_, label), owner, items = items[-1], k, items[:-1]
        elif len(items) != count:
            raise ConfigurationError(f"--bounds: {path} declares {len(items)} bounds for {count} columns")
        names += [n for n, _ in items]
        cols += [tuple(b) for _, b in items]
    return cols, names, label, owner


@click.command()
@click.option("--rows", "-n", "n_rows", type=click.IntRange(min=2), required=True,
              help="Number of rows N the parties have in common (public).")
@click.option("--party-columns", required=True, metavar="D0,D1,...",
              help="Columns of each party, comma separated (global order; the label owner's without the intercept).")
@click.option("--model", type=click.Choice(["linear", "logistic"]), default="linear", show_default=True,
              help="Regression model.")
@click.option("--mechanism", type=click.Choice(["gaussian-fm", "laplace-fm", "relaxed-fm", "noisy-gd"]),
              default="gaussian-fm", show_default=True,
              help="Release of the run: a functional mechanism, or noisy-gd (T = 25 noisy gradient rounds, R = 1; "
                   "two-sided: two parties, sigma calibrated against a hostile co-party).")
@click.option("--epsilon", "epsilons", default="0.25,0.5,1,2,4,8", show_default=True,
              help="Grid of epsilon values, comma separated.")
@click.option("--delta", type=float, default=1e-5, show_default=True, help="Privacy parameter delta.")
@click.option("--label-owner", type=click.IntRange(min=0), default=None,
              help="Index of the party holding the label (default 0, or the party whose --bounds file also holds "
                   "the label's bounds).")
@click.option("--bounds", default=None, metavar="FILE[,FILE...]",
              help="The parties' bounds files (`vfl party --bounds`), one per party in --party-columns order: the "
                   "result is then in the declared units. Default: every column declared in (-1, 1).")
@click.option("--no-fit-intercept", is_flag=True, help="The run has no intercept (vfl coordinator --no-fit-intercept).")
@click.option("--spread", type=float, default=1.0 / 3.0, show_default=True,
              help="Assumed standard deviation of a column as a share of its half-range (1/3: bounds at +-3 sd).")
@click.option("--r2", type=float, default=0.5, show_default=True, help="Assumed population R^2 (linear).")
@click.option("--logit-sd", type=float, default=1.0, show_default=True,
              help="Assumed standard deviation of the log-odds (logistic).")
@click.option("--one-sided/--two-sided", "one_sided", default=False, show_default=True,
              help="Noise of cross-party blocks: two-sided (a networked run) or central (the in-process estimators).")
@click.option("--replicates", type=click.IntRange(min=20), default=200, show_default=True,
              help="Simulated runs per epsilon (more: smaller Monte Carlo error, shown as +- s.e.).")
@click.option("--seed", type=click.IntRange(min=0), default=None, help="Seed of the simulation (reproducible output).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
def plan(n_rows: int, party_columns: str, model: str, mechanism: str, epsilons: str, delta: float,
         label_owner: int | None, bounds: str | None, no_fit_intercept: bool, spread: float, r2: float,
         logit_sd: float, one_sided: bool, replicates: int, seed: int | None, as_json: bool) -> None:
    """Before spending any budget: the noise per block, the expected excess error and the expected interval width
    per coefficient over a grid of epsilon, from public facts only (docs/report.md)."""
    from vfl.models.planner import plan_epsilon

    counts = _numbers(party_columns, "--party-columns", int)
    cols, names, label_bounds, owner = _plan_bounds(bounds, counts)
    result = plan_epsilon(n_rows, counts, model=model, mechanism=mechanism,
                          epsilons=_numbers(epsilons, "--epsilon"), delta=delta,
                          label_owner=owner if label_owner is None else label_owner, fit_intercept=not no_fit_intercept,
                          bounds=cols, label_bounds=label_bounds, names=names, spread=spread, r2=r2,
                          logit_sd=logit_sd, noise_sharing="central" if one_sided else "two-sided",
                          replicates=replicates, random_state=seed)
    click.echo(json.dumps(result.to_dict(), indent=2) if as_json else result.text())


@click.command()
@click.argument("model_path", type=click.Path(dir_okay=False))
@click.option("--ledger", "ledger_paths", type=click.Path(dir_okay=False), multiple=True,
              help="A party's privacy ledger (`vfl budget`): add what each of its datasets has spent. Repeat it for "
                   "the ledgers of several parties.")
@click.option("--html", "html_out", type=click.Path(dir_okay=False), default=None,
              help="Also write one self-contained HTML page with figures (coefficients with intervals, error vs "
                   "epsilon from the planner, budget over runs with --ledger); atomic, refused if it exists.")
@click.option("--force", "--overwrite", "force", is_flag=True, help="Overwrite an existing --html file.")
@click.option("--seed", type=click.IntRange(min=0), default=None,
              help="Seed of the planner's simulation in the HTML page (reproducible figures).")
def report(model_path: str, ledger_paths: tuple[str, ...], html_out: str | None, force: bool, seed: int | None
           ) -> None:
    """A released model in words: coefficients with intervals and p-values, fit measures, the privacy guarantee in
    plain words and, with --ledger, the budget spent."""
    from vfl.data.files import check_writable
    from vfl.models.modelio import atomic_write_text
    from vfl.models.report import report_html, report_text
    from vfl.privacy.ledger import Ledger

    if html_out:
        check_writable(html_out, force=force)
    doc = _read_model(model_path)
    ledgers = [(path, Ledger(path, create=False)) for path in ledger_paths]
    click.echo(report_text(doc, ledgers=ledgers))
    if html_out:
        atomic_write_text(html_out, report_html(doc, ledgers=ledgers, random_state=seed))
        click.echo(f"report page written to {html_out}")


def _read_model(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise ConfigurationError(f"model file {path} not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigurationError(f"cannot read model file {path}: {exc}") from None
    if not isinstance(doc, dict):
        raise ConfigurationError(f"{path} is not a vfl model file")
    return doc
