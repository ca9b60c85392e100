"""``vfl check``: the preflight of one role before its first run (issue 32; the checks are
:mod:`vfl.net.preflight`, the data check reuses `vfl party`'s own reading). Registered on the ``vfl`` group by
:mod:`vfl.cli`; nothing is sent but a ZeroMQ handshake, no ledger is written, no budget spent."""

from __future__ import annotations

import click

__all__ = ["check"]

ROLES = ("party", "site", "serve", "coordinator")


@click.command()
@click.argument("role", type=click.Choice(ROLES))
@click.option("--config", type=click.Path(dir_okay=False), default=None,
              help="party/site: the party config TOML `vfl party --config` reads (options override it).")
@click.option("--name", default=None, help="party/site: this member's name.")
@click.option("--connect", default=None,
              help="party/site: the coordinator's (or a scoring hub's) endpoint; a ZeroMQ handshake is made, no "
                   "message sent.")
@click.option("--bind", default=None, help="coordinator: the --bind it will use (bound for a moment and released).")
@click.option("--curve-dir", type=click.Path(file_okay=False), default=None, help="The role's CURVE key folder.")
@click.option("--identity-dir", type=click.Path(file_okay=False), default=None,
              help="party/site: its signing identity and the pinned NAME.sign.pub files.")
@click.option("--expect", default=None, metavar="NAME,NAME,...",
              help="The parties of the deployment: a party's pinned identities (itself included), or the keys a "
                   "coordinator authorises, must be exactly these.")
@click.option("--data", type=click.Path(dir_okay=False), default=None, help="party/site: its table (CSV/Parquet).")
@click.option("--features", default=None, help="party/site: its columns, as `vfl party --features`.")
@click.option("--label", default=None, help="party/site: its label column, if any.")
@click.option("--id", "id_column", default=None, help="party/site: its row-ID column, if it aligns by --id.")
@click.option("--bounds", type=click.Path(dir_okay=False), default=None, help="party/site: its bounds TOML.")
@click.option("--model", "model_path", type=click.Path(dir_okay=False), default=None,
              help="serve: the model file `vfl serve` will serve (every roster party's signature is checked).")
@click.option("--ledger", "ledger_path", type=click.Path(dir_okay=False), default=None,
              help="party/site: its privacy ledger (default: that of --name); opened read only.")
@click.option("--timeout", type=float, default=30.0, show_default=True,
              help="Seconds to wait for the handshake with --connect.")
def check(role: str, config: str | None, name: str | None, connect: str | None, bind: str | None,
          curve_dir: str | None, identity_dir: str | None, expect: str | None, data: str | None,
          features: str | None, label: str | None, id_column: str | None, bounds: str | None,
          model_path: str | None, ledger_path: str | None, timeout: float) -> None:
    """Preflight of one role: keys, identities, the hub's CURVE key, data and bounds, ledger; one line per check.

    Exits 2 if any check fails. Sends nothing but a ZeroMQ handshake (no registration, nothing data-dependent),
    writes nothing and spends no budget. Run it on each machine before the first run (docs/deployment.md).
    """
    from vfl.net import preflight as pf

    expected = [n.strip() for n in expect.split(",") if n.strip()] if expect else None
    checks = pf.Preflight(click.echo)
    if role == "coordinator":
        if curve_dir:
            checks.run("keys", lambda: pf.server_keys(curve_dir, expected))
        else:
            checks.skip("keys", "no --curve-dir: the coordinator may then listen on loopback only")
        if bind:
            checks.run("bind", lambda: pf.bind_free(bind, curve=bool(curve_dir)))
    else:
        _member_checks(checks, role, config, name, connect, curve_dir, identity_dir, expected, data, features, label,
                       id_column, bounds, ledger_path, timeout, model_path)
    if checks.failed:
        from vfl.exceptions import ConfigurationError

        raise ConfigurationError(f"{checks.failed} of {len(checks.lines)} checks failed (the FAIL lines above)")
    click.echo(f"all {len(checks.lines)} checks passed" if checks.lines else "nothing to check: see --help")


def _member_checks(checks, role, config, name, connect, curve_dir, identity_dir, expected, data, features,  # noqa
                   label, id_column, bounds, ledger_path, timeout, model_path) -> None:
    from pathlib import Path

    from vfl.data.config import PartyConfig, load_party_config
    from vfl.exceptions import ConfigurationError
    from vfl.net import preflight as pf

    cfg = load_party_config(config) if config else PartyConfig()
    cfg.name, cfg.connect = name or cfg.name, connect or cfg.connect
    cfg.data, cfg.label, cfg.id = data or cfg.data, label or cfg.label, id_column or cfg.id
    cfg.features = [features] if features else cfg.features
    cfg.bounds, cfg.ledger = bounds or cfg.bounds, ledger_path or cfg.ledger
    cfg.curve_dir, cfg.identity_dir = curve_dir or cfg.curve_dir, identity_dir or cfg.identity_dir
    if not cfg.name:
        raise ConfigurationError(f"vfl check {role} needs --name (or name = ... in --config)")
    if cfg.curve_dir:
        checks.run("keys", lambda: pf.client_keys(cfg.curve_dir, cfg.name))
    else:
        checks.skip("keys", "no --curve-dir: plaintext, loopback experiments only")
    if cfg.identity_dir:
        checks.run("identities", lambda: pf.pinned_identities(cfg.identity_dir, cfg.name, expected))
    else:
        checks.skip("identities", "no --identity-dir: a party does not start without one")
    hub = "scoring hub" if role == "serve" else "coordinator"
    if cfg.connect:
        checks.run(hub, lambda: pf.hub_answers(cfg.connect, cfg.name, cfg.curve_dir, timeout, hub))
    if role == "serve":   # serving spends no budget: no ledger
        if not model_path:
            raise ConfigurationError("vfl check serve needs --model (the file `vfl serve` will serve)")
        if checks.run("model", lambda: pf.served_model(model_path, cfg.name, cfg.identity_dir)) and cfg.data:
            checks.run("data", lambda: pf.serving_table(model_path, cfg.name, cfg.data, cfg.id or "", features))
        return
    if cfg.data or cfg.dataset:
        checks.run("data", lambda: _data(cfg, config, role))
    from vfl.privacy.ledger import default_ledger_path

    checks.run("ledger", lambda: pf.ledger_opens(Path(cfg.ledger or default_ledger_path(cfg.name)), cfg.name))


def _data(cfg, config, role) -> str:  # noqa: ANN001
    """The table and bounds as `vfl party` reads them at start, and declared bounds for every column."""
    from vfl.protocols.local_data import check_declared_bounds, load_party_data
    from vfl.protocols.policy import PartyPolicy

    if role == "site" and not cfg.label:
        from vfl.exceptions import ConfigurationError

        raise ConfigurationError("a site holds the label of its rows: give --label")
    if not cfg.features and not cfg.label:
        from vfl.exceptions import ConfigurationError

        raise ConfigurationError("give --features (and --label for the label owner)")
    local = load_party_data(cfg, config)
    check_declared_bounds(local, PartyPolicy(), allow=False)
    label = f", label {cfg.label}" if cfg.label else ""
    return (f"{cfg.data or cfg.dataset}: {local.n_rows} rows, {len(local.feature_names)} features{label}; public "
            "bounds declared for every column")
