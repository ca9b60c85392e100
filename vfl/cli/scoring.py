"""``vfl score`` (the requester's hub) and ``vfl serve`` (a feature holder serving its block): federated scoring
(issue 22; docs/serving.md). Registered on the ``vfl`` group by :mod:`vfl.cli`; machinery imported inside the
commands so ``vfl --help`` stays fast."""

from __future__ import annotations

from typing import Any

import click

from vfl.cli.options import emit

__all__ = ["score", "serve"]


@click.command()
@click.option("--model", "model_path", type=click.Path(dir_okay=False), required=True,
              help="The released model JSON (every serving party holds the same file).")
@click.option("--ids", "ids_path", type=click.Path(dir_okay=False), default=None,
              help="Query CSV with a header: one ID column (or name it with --id-column).")
@click.option("--id-column", default=None, help="The query file's ID column (default: its only column).")
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="Scores CSV: the IDs in the query's order, the score(s) and a status column (scored/missing).")
@click.option("--force", "--overwrite", "force", is_flag=True, help="Overwrite an existing --out file.")
@click.option("--bind", default="tcp://127.0.0.1:5560", show_default=True, help="Endpoint the parties connect to.")
@click.option("--timeout", type=float, default=120.0, show_default=True,
              help="Seconds to wait for the parties to register, and for each party's answer or heartbeat.")
@click.option("--max-query-ids", type=click.IntRange(1, 10_000_000), default=100_000, show_default=True,
              help="Largest number of IDs in one query (a larger query is refused before anything is sent); every "
                   "`vfl serve` refuses a plan above its own --max-query-ids (default 100,000).")
@click.option("--curve-dir", type=click.Path(file_okay=False), default=None,
              help="Enable CURVE: directory with coordinator.key_secret and the serving parties' public keys.")
@click.option("--http", "http_address", default=None,
              help="Instead of --ids/--out: keep the parties connected and answer POST /score {\"ids\": [...]} "
                   "on HOST:PORT (GET /healthz, /readyz) until stopped; docs/serving.md.")
@click.option("--allow-plaintext-public", is_flag=True,
              help="Listen on a non-loopback --bind without CURVE, or serve --http on a non-loopback address "
                   "(plain HTTP: IDs and scores in clear). Only on a network you trust.")
@click.option("--http-workers", type=click.IntRange(1, 256), default=8, show_default=True,
              help="--http: threads serving connections (a fixed pool).")
@click.option("--http-max-connections", type=click.IntRange(1, 10_000), default=64, show_default=True,
              help="--http: open connections at most (served or waiting); one more is answered 503 and closed.")
@click.option("--http-rate", type=click.FloatRange(0, 1e6), default=100.0, show_default=True,
              help="--http: requests per second per client address (0: no limit); over it: 429 with Retry-After.")
@click.option("--http-burst", type=click.IntRange(1, 10**6), default=200, show_default=True,
              help="--http: requests a client may send at once before --http-rate applies.")
@click.option("--quiet", "-q", is_flag=True, help="Print only the result line.")
@click.option("--allow-unsigned-model", is_flag=True,
              help="INSECURE: use a model file that carries no party's signature (written before models were "
                   "signed, or by an --insecure-no-identity run); warns loudly. A file with a missing or "
                   "invalid signature is refused even so.")
@click.option("--identity-dir", type=click.Path(file_okay=False), default=None,
              help="Pinned NAME.sign.pub of the parties (`vfl keys`): every party's signature must be under the key "
                   "pinned here (default: under the keys the model's roster records).")
def score(model_path: str, ids_path: str | None, id_column: str | None, out: str | None, force: bool, bind: str,
          timeout: float, max_query_ids: int, curve_dir: str | None, http_address: str | None,
          allow_plaintext_public: bool, http_workers: int, http_max_connections: int, http_rate: float,
          http_burst: int, quiet: bool, allow_unsigned_model: bool, identity_dir: str | None) -> None:
    """Score the IDs of --ids with a model whose features the parties hold (run `vfl serve` on every party)."""
    from vfl.net.notices import check_bind

    check_bind(bind, curve=bool(curve_dir), allow_plaintext_public=allow_plaintext_public, role="scoring hub")
    if http_address is not None:
        if ids_path is not None or out is not None:
            raise click.UsageError("--http serves queries online; it excludes --ids and --out")
        from vfl.net.scoring_http import HTTPLimits

        limits = HTTPLimits(http_workers, http_max_connections, http_rate, http_burst)
        _serve_http(model_path, bind, timeout, max_query_ids, curve_dir, http_address, quiet, allow_plaintext_public,
                    limits, allow_unsigned_model, identity_dir)
        return
    if ids_path is None or out is None:
        raise click.UsageError("give --ids and --out (a batch), or --http HOST:PORT (the online service)")
    from vfl.data.files import check_writable
    from vfl.net.scoring import ScoringHubNode, read_query_file, write_scores
    from vfl.net.transport import load_server_keys
    from vfl.protocols.model_signing import load_signed_model
    from vfl.protocols.scoring import check_query

    check_writable(out, force=force)
    model = load_signed_model(model_path, allow_unsigned=allow_unsigned_model,   # every roster party signed it
                              pinned=_pinned(identity_dir))
    id_name, ids = read_query_file(ids_path, id_column)
    check_query(ids, max_query_ids)   # a bad query is refused before anyone is contacted
    curve = load_server_keys(curve_dir) if curve_dir else None
    hub = ScoringHubNode(model, bind, curve=curve, timeout=timeout, max_query_ids=max_query_ids,
                         log=None if quiet else emit)
    try:
        hub.start()
        scores = hub.score(ids)
        write_scores(out, model, scores, id_name)
    except BaseException as exc:
        hub.close(reason=str(exc) or type(exc).__name__)
        raise
    hub.close()
    n_missing = int(scores.missing.sum())
    emit(f"scored {len(ids) - n_missing} of {len(ids)} IDs ({n_missing} missing: not held by every party) -> {out}")


def _pinned(identity_dir: str | None) -> Any:
    """The pinned signing keys of ``--identity-dir`` (None: the signatures are checked under the roster's keys)."""
    from vfl.secure.identity import load_pinned

    return None if identity_dir is None else load_pinned(identity_dir)


def _serve_http(model_path: str, bind: str, timeout: float, max_query_ids: int, curve_dir: str | None,
                address: str, quiet: bool, allow_plaintext_public: bool, limits: Any,
                allow_unsigned_model: bool = False, identity_dir: str | None = None) -> None:
    from vfl.exceptions import ConfigurationError
    from vfl.net.notices import is_loopback
    from vfl.net.scoring import ScoringHubNode
    from vfl.net.scoring_http import ScoringService, parse_http_address
    from vfl.net.transport import load_server_keys
    from vfl.protocols.model_signing import load_signed_model

    host, port = parse_http_address(address)
    if not (allow_plaintext_public or is_loopback(f"tcp://{host}:{port}")):
        raise ConfigurationError(f"the scoring service refuses to serve plain HTTP on {address}: IDs and scores would "
                                 "travel in clear; bind 127.0.0.1 behind a TLS reverse proxy, or pass "
                                 "--allow-plaintext-public on a network you trust")
    model = load_signed_model(model_path, allow_unsigned=allow_unsigned_model, pinned=_pinned(identity_dir))
    curve = load_server_keys(curve_dir) if curve_dir else None
    hub = ScoringHubNode(model, bind, curve=curve, timeout=timeout, max_query_ids=max_query_ids,
                         log=None if quiet else emit)
    try:
        hub.start()
        ScoringService(hub, host, port, log=emit, limits=limits).serve()
    finally:
        hub.close()


@click.command()
@click.option("--model", "model_path", type=click.Path(dir_okay=False), required=True,
              help="The released model JSON; this party serves only its own block of it.")
@click.option("--connect", required=True, help="The scoring hub's endpoint, e.g. tcp://127.0.0.1:5560.")
@click.option("--name", required=True, help="This party's name in the model.")
@click.option("--data", type=click.Path(dir_okay=False), required=True, help="This party's CSV or Parquet table.")
@click.option("--id", "id_column", required=True, help="The table's row-ID column (looked up per query).")
@click.option("--features", default=None,
              help="Its raw columns (comma-separated); if given they must be the model's columns of this party.")
@click.option("--curve-dir", type=click.Path(file_okay=False), default=None,
              help="Enable CURVE: directory with NAME.key_secret and coordinator.key (the hub's public key).")
@click.option("--identity-dir", type=click.Path(file_okay=False), default=None,
              help="This party's NAME.sign.secret and the pinned *.sign.pub of its co-parties (`vfl keys`).")
@click.option("--insecure-no-identity", is_flag=True,
              help="Serve without identities (loopback experiments only): co-parties' keys are not checked.")
@click.option("--allow-unsigned-model", is_flag=True,
              help="INSECURE: serve a model file that carries no party's signature (written before models were "
                   "signed, or by an --insecure-no-identity run); warns loudly. A file with a missing or "
                   "invalid signature is refused even so.")
@click.option("--timeout", type=float, default=120.0, show_default=True,
              help="Seconds of silence from the hub after which this party stops.")
@click.option("--max-query-ids", type=click.IntRange(1, 10_000_000), default=100_000, show_default=True,
              help="This party's own cap on the IDs of one query: a hub planning or sending more is refused "
                   "before the query is read.")
def serve(model_path: str, connect: str, name: str, data: str, id_column: str, features: str | None,
          curve_dir: str | None, identity_dir: str | None, insecure_no_identity: bool, allow_unsigned_model: bool,
          timeout: float, max_query_ids: int) -> None:
    """Serve this party's block of a model to a scoring hub (`vfl score`) until it ends the session."""
    from vfl.models.modelio import load_model
    from vfl.net.scoring import ScoringPartyNode, load_serving_table
    from vfl.net.transport import load_client_keys

    model = load_model(model_path)
    ids, X = load_serving_table(model, name, data, id_column, features)
    curve = load_client_keys(curve_dir, name) if curve_dir else None
    node = ScoringPartyNode(model, name, ids, X, connect, curve=curve, identity_dir=identity_dir,
                            insecure_no_identity=insecure_no_identity, allow_unsigned_model=allow_unsigned_model,
                            timeout=timeout, log=emit, max_query_ids=max_query_ids)
    emit(f"[{name}] {len(ids)} IDs loaded; connecting to {connect}")
    answered = node.run()
    emit(f"[{name}] session ended: answered {answered} quer{'y' if answered == 1 else 'ies'}")
