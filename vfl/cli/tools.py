"""``vfl predict``, ``vfl keys`` and ``vfl demo``: the tools around a run."""

from __future__ import annotations

from pathlib import Path

import click

from vfl.cli.options import echo
from vfl.data.files import check_writable
from vfl.exceptions import ConfigurationError, ProtocolError
from vfl.protocols.settings import FM_MECHANISMS

__all__ = ["predict", "keys", "demo"]


# ---------------------------------------------------------------------------------------------- predict
@click.command()
@click.option("--model", "model_path", type=click.Path(dir_okay=False), required=True,
              help="Model JSON written by `vfl coordinator`.")
@click.option("--data", type=click.Path(dir_okay=False), required=True,
              help="CSV (or Parquet) with the model's raw input columns by name (categorical columns as their raw "
                   "values: the model's recorded preprocessing is applied, docs/data_preparation.md).")
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="Write predictions here (default stdout); an existing file is refused unless --force.")
@click.option("--force", "--overwrite", "force", is_flag=True, help="Overwrite an existing --out file.")
@click.option("--proba", is_flag=True, help="Logistic models: print P(y = 1) instead of the 0/1 label.")
@click.option("--id", "id_column", default=None,
              help="Pass this column (e.g. row IDs, any text) through as the first output column.")
@click.option("--output-column", default=None,
              help="Header of the prediction column (default: LABEL_predicted, or LABEL_probability with --proba).")
@click.option("--out-of-bounds", type=click.Choice(["refuse", "flag", "clip"]), default="refuse", show_default=True,
              help="Rows outside the model's public bounds: refuse the file, flag them (score as they are and add "
                   "an out_of_bounds column naming the columns), or clip them to the bounds.")
@click.option("--allow-unsigned-model", is_flag=True,
              help="INSECURE: use a model file that carries no party's signature (written before models were "
                   "signed, or by an --insecure-no-identity run); warns loudly.")
@click.option("--identity-dir", type=click.Path(file_okay=False), default=None,
              help="Pinned NAME.sign.pub of the parties (`vfl keys`): every party's signature must be under the key "
                   "pinned here (default: under the keys the model's roster records).")
def predict(model_path: str, data: str, out: str | None, proba: bool, force: bool, id_column: str | None,
            output_column: str | None, out_of_bounds: str, allow_unsigned_model: bool, identity_dir: str | None
            ) -> None:
    """Predict with a released model on a joined table of raw rows (a model every party of its roster signed)."""
    from vfl.models.modelio import atomic_write_text
    from vfl.models.predict import predict_file
    from vfl.protocols.model_signing import load_signed_model
    from vfl.secure.identity import load_pinned

    if out:
        check_writable(out, force=force)
    m = load_signed_model(model_path, allow_unsigned=allow_unsigned_model,
                          pinned=None if identity_dir is None else load_pinned(identity_dir))
    result = predict_file(m, data, id_column=id_column, column=output_column, proba=proba,
                          out_of_bounds=out_of_bounds)
    if result.unchecked:
        click.echo(f"vfl: note: the model records no public bounds for the columns of {', '.join(result.unchecked)} "
                   "((DP-)BCD uses the data as given): those columns are not checked", err=True)
    if result.n_outside:
        click.echo(f"vfl: warning: {result.n_outside} of {result.n_rows} rows lie outside the model's public bounds "
                   f"({'flagged in the out_of_bounds column' if out_of_bounds == 'flag' else 'clipped to them'})",
                   err=True)
    if out:
        atomic_write_text(out, result.text)
        echo(f"{result.n_rows} predictions written to {out}")
    else:
        click.echo(result.text, nl=False)


# ---------------------------------------------------------------------------------------------- keys
@click.command()
@click.option("--out", type=click.Path(file_okay=False), required=True, help="Directory for the keys.")
@click.option("--names", multiple=True,
              help="Party names (comma separated or repeated) of a new folder; coordinator keys are always written.")
@click.option("--add", "add", multiple=True,
              help="Add these parties (comma separated or repeated) to an existing --out folder; no existing key is "
                   "touched (the others then only need the newcomers' public files, docs/deployment.md).")
@click.option("--bundle", "bundles", multiple=True,
              help="Copy what one organisation's machine needs into OUT/bundle-ORG (ORG: a party or coordinator; "
                   "comma separated or repeated): a party's own secrets, coordinator.key and every NAME.sign.pub; "
                   "the coordinator's secret and every NAME.key.")
def keys(out: str, names: tuple[str, ...], add: tuple[str, ...], bundles: tuple[str, ...]) -> None:
    """Write CURVE certificates (zmq.auth) for the coordinator and each party, and each party's Ed25519 signing
    identity (NAME.sign.secret, secret, mode 0600; NAME.sign.pub, public). Existing keys are never overwritten."""
    from vfl.net.keyfiles import add_parties, write_bundle, write_key_folder
    from vfl.net.messages import validate_name

    def split(items: tuple[str, ...]) -> list[str]:
        flat = [n.strip() for item in items for n in item.split(",") if n.strip()]
        try:
            for n in flat:
                validate_name(n)
        except ProtocolError as exc:
            raise ConfigurationError(str(exc)) from None
        return flat

    if names and add:
        raise ConfigurationError("--names makes a new key folder and --add adds parties to an existing one: give one")
    if not (names or add or bundles):
        raise ConfigurationError("give --names NAME[,NAME...] (a new folder), --add NAME (add parties to --out) or "
                                 "--bundle ORG")
    written = write_key_folder(out, split(names)) if names else add_parties(out, split(add)) if add else []
    for path in written:
        echo(str(path))
    for org in split(bundles):
        echo(f"{write_bundle(out, org)}: everything {org}'s machine needs, and no other organisation's secret")
    if add:
        echo(f"send {', '.join(f'{n}.key' for n in split(add))} to the coordinator and the .sign.pub file(s) to every "
              "co-party; the secrets stay on this machine (docs/deployment.md)")
    elif written:
        echo(f"give {Path(out) / 'coordinator.key'}, NAME.key_secret and NAME.sign.secret to each party; keep "
              "coordinator.key_secret and the parties' .key files at the coordinator; give every party the "
              "NAME.sign.pub of each co-party it accepts (its --identity-dir holds its own NAME.sign.secret and those "
              ".sign.pub files); `vfl keys --out DIR --bundle ORG` copies exactly one organisation's files")


# ---------------------------------------------------------------------------------------------- demo
@click.command()
@click.option("--rows", type=int, default=1000, show_default=True, help="Rows of the synthetic data set.")
@click.option("--mechanism", type=click.Choice(FM_MECHANISMS), default="gaussian-fm", show_default=True,
              help="Mechanism to demonstrate.")
@click.option("--epsilon", type=float, default=1.0, show_default=True, help="Privacy budget epsilon.")
@click.option("--delta", type=float, default=1e-5, show_default=True, help="Privacy parameter delta.")
@click.option("--key-bits", type=int, default=2048, show_default=True, help="Paillier key size.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Seed of the synthetic data (not the noise).")
@click.option("--timeout", type=float, default=120.0, show_default=True, help="Run timeout in seconds.")
@click.option("--out-dir", type=click.Path(file_okay=False), default=None,
              help="Write the demo's data, keys and model to this new or empty folder and keep them (default: a "
                   "temporary folder, removed at the end).")
def demo(rows: int, mechanism: str, epsilon: float, delta: float, key_bits: int, seed: int, timeout: float,
         out_dir: str | None) -> None:
    """Coordinator + two parties as local processes on a built-in synthetic data set."""
    from vfl.demo import run_demo

    run_demo(rows=rows, mechanism=mechanism, epsilon=epsilon, delta=delta, key_bits=key_bits, seed=seed,
             timeout=timeout, echo=echo, workdir=out_dir)
