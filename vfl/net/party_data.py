"""A party's table and its public declarations as ``vfl party`` loads them (a chunked file, an in-memory CSV or a
built-in data set), outside the CLI so that ``vfl party`` and ``vfl check`` share one decision (issue 30)."""

from __future__ import annotations

from typing import Any

from vfl.exceptions import ConfigurationError

__all__ = ["load_party_data"]


def load_party_data(cfg: Any, config: str | None) -> Any:
    """The party's table with its public declarations (:class:`vfl.net.party.LocalData`), read as ``vfl party``
    reads it (``cfg``: the command's settings with data, dataset, features, label, id, bounds; ``config``: the
    ``--config`` file), checked before connecting; shared by ``vfl party`` and ``vfl check``."""
    from dataclasses import replace

    from vfl.data.config import load_dataset_table, open_party_table, party_declarations, read_party_csv
    from vfl.net.party import LocalData

    feature_spec: list[str] | str = cfg.features if len(cfg.features) != 1 else cfg.features[0]
    # public declarations: a bounds file (--bounds / bounds = ...) or the config's inline [bounds], [categories],
    # [impute] tables (both: refused); declared preprocessing maps raw columns before the bounds check
    decl = party_declarations(cfg, config)
    pp = decl.preprocessing if decl is not None else None
    if cfg.data and decl is not None and not cfg.id:
        # declared bounds: the columns stay on disk and are read in chunks (issue 8); with --id the PSI alignment
        # reorders the rows, so the table is loaded in memory
        file_table = open_party_table(cfg.data, feature_spec, label=cfg.label, id_column=cfg.id, preprocessing=pp)
        declared, label_bounds, record = decl.resolve(file_table.inputs, cfg.label)
        local = LocalData.from_table(cfg.name, file_table, bounds=declared,  # type: ignore[arg-type]
                                     label_bounds=label_bounds)
    else:
        if cfg.dataset:
            table = load_dataset_table(cfg.dataset, feature_spec, label=cfg.label)
        else:
            table = read_party_csv(cfg.data, feature_spec, label=cfg.label, id_column=cfg.id,  # type: ignore
                                   preprocessing=pp)
        declared, label_bounds, record = (decl.resolve(table.inputs or table.feature_names, cfg.label) if decl
                                          else (table.bounds, (table.bounds or {}).get(cfg.label or ""), None))
        if cfg.dataset and record:
            raise ConfigurationError("declared preprocessing ([categories]/[impute]) applies to --data files, not "
                                     f"to the built-in data set {cfg.dataset}")
        fm_view = {} if decl else {"fm_columns": table.fm_columns, "fm_bounds": table.fm_bounds}
        local = LocalData.build(cfg.name, table.X, table.y, feature_names=table.feature_names,  # type: ignore
                                bounds=declared, label_bounds=label_bounds, ids=table.ids, **fm_view)
    local = replace(local, label_name=cfg.label, preprocessing=record)
    return local
