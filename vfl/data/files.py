"""Output files: checks made before any work starts (layer: base; used by the CLI commands and the scoring CLI).

``check_writable`` moved here from :mod:`vfl.cli` (issue 30), which cut the import cycle ``vfl.cli`` <->
``vfl.cli_scoring`` (now :mod:`vfl.cli.scoring`); ``vfl.cli.check_writable`` still names it.
"""

from __future__ import annotations

from pathlib import Path

from vfl.exceptions import ConfigurationError

__all__ = ["check_writable", "is_special_file"]


def is_special_file(path: str | Path) -> bool:
    """True when ``path`` exists and is not a regular file or folder (a device such as /dev/null, a FIFO): output
    to it is streamed, not "overwritten"."""
    import os
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def check_writable(out: str, *, force: bool) -> None:
    """Before any work: ``out`` must not exist (unless ``force``) and its folder must accept a new file; an existing
    device or FIFO (``/dev/null``) is written to, not overwritten, so it only needs to be writable."""
    import os
    import tempfile  # not at import time: ``vfl --help`` stays fast

    path = Path(out)
    if is_special_file(path):
        if not os.access(path, os.W_OK):
            raise ConfigurationError(f"cannot write {out}: permission denied")
        return
    if path.exists() and not force:
        raise ConfigurationError(f"{out} exists; refusing to overwrite it (use --force)")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise ConfigurationError(f"cannot write {out}: folder {folder} does not exist")
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=f".{path.name}.", suffix=".check"):
            pass
    except OSError as exc:
        raise ConfigurationError(f"cannot write {out}: {exc.strerror or exc}") from None
