"""The ``vfl`` command: a lazy table of commands (pip's ``commands/__init__.py``, click's ``LazyGroup``).

Each command lives in the module of its family (:mod:`vfl.cli.coordinator`, :mod:`vfl.cli.party`,
:mod:`vfl.cli.cape`, :mod:`vfl.cli.scoring`, :mod:`vfl.cli.budget`, :mod:`vfl.cli.tools`, :mod:`vfl.cli.report`,
:mod:`vfl.cli.check`); shared option bundles are declared once in :mod:`vfl.cli.options`. ``vfl --help`` prints the
one-line summaries of :data:`COMMANDS` and imports no command module; a command's module is imported only when
that command runs (or its own ``--help`` is asked for).

Every user error ends with one line ``vfl: error: ...`` on stderr and a non-zero exit code, never a
traceback. The code is the ``exit_code`` of the exception's class (:mod:`vfl.exceptions`), mapped here only, by
:func:`exit_code_for`:

====  ==========================================================================
code  meaning
====  ==========================================================================
0     success
1     other vfl error (privacy parameters, keys, degenerate objective, ...)
2     bad option, configuration or data (ConfigurationError, DataValidationError), or a policy refusal: a
      plan above the member's limits or its privacy budget (BudgetError)
3     a party failed, timed out or the run was aborted (PartyFailure)
4     protocol violation by a peer (ProtocolError)
130   interrupted (Ctrl-C)
====  ==========================================================================
"""

from __future__ import annotations

import importlib
import sys
import warnings
from typing import Any

import click

from vfl.data.files import check_writable  # noqa: F401  (``vfl.cli.check_writable`` still names it)
from vfl.exceptions import PrivacyLeakWarning, VFLError
from vfl.secure.native import IMPLEMENTATION as INNER_LOOPS

__all__ = ["cli", "main", "exit_code_for", "COMMANDS"]

#: command name -> (module, attribute, one-line summary shown by ``vfl --help``); tests/cli/test_cli_package.py checks
#: every summary against the command's own docstring, so the two cannot drift apart.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "aggregator": ("vfl.cli.cape", "aggregator",
                   "Run the capeFM aggregator: wait for S sites with disjoint rows, one CAPE round, write the model."),
    "budget": ("vfl.cli.budget", "budget",
               "A party's privacy ledger: what each dataset has spent, its runs (docs/privacy.md)."),
    "check": ("vfl.cli.check", "check", "Preflight of one role: keys, identities, the hub's CURVE key, data and "
                                        "bounds, ledger; one line per check."),
    "coordinator": ("vfl.cli.coordinator", "coordinator", "Run the coordinator: wait for K parties (or S cape-fm "
                                                          "sites), drive the protocol, write the model."),
    "demo": ("vfl.cli.tools", "demo", "Coordinator + two parties as local processes on a built-in synthetic data set."),
    "djica-aggregator": ("vfl.cli.cape", "djica_aggregator", "Run the capePCA + capeDJICA aggregator: S sites, one "
                                                             "capePCA release, J CAPE rounds (docs/capedjica.md)."),
    "djica-site": ("vfl.cli.cape", "djica_site", "Run one capeDJICA site: its time points, the capePCA release and "
                                                 "the CAPE rounds (docs/capedjica.md)."),
    "evaluate": ("vfl.cli.evaluate", "evaluate", "The label owner's held-out evaluation: score the test IDs through "
                                                 "the scoring protocol, compute the metrics."),
    "keys": ("vfl.cli.tools", "keys", "Write CURVE certificates (zmq.auth) for the coordinator and each party, and "
                                      "each party's Ed25519 signing identity (NAME.sign.secret, secret, mode 0600; "
                                      "NAME.sign.pub, public)."),
    "party": ("vfl.cli.party", "party",
              "Run one party: read its columns, register, compute its blocks and secure-product sides."),
    "plan": ("vfl.cli.report", "plan", "Before spending any budget: the noise per block, the expected excess error "
                                       "and the expected interval width per coefficient over a grid of epsilon, "
                                       "from public facts only (docs/report.md)."),
    "predict": ("vfl.cli.tools", "predict", "Predict with a released model on a joined table of raw rows (a model "
                                            "every party of its roster signed)."),
    "report": ("vfl.cli.report", "report", "A released model in words: coefficients with intervals and p-values, fit "
                                           "measures, the privacy guarantee in plain words and, with --ledger, the "
                                           "budget spent."),
    "score": ("vfl.cli.scoring", "score", "Score the IDs of --ids with a model whose features the parties hold (run "
                                          "`vfl serve` on every party)."),
    "serve": ("vfl.cli.scoring", "serve",
              "Serve this party's block of a model to a scoring hub (`vfl score`) until it ends the session."),
    "site": ("vfl.cli.cape", "site",
             "Run one capeFM site: its rows, one CAPE round through the aggregator (docs/capefm.md)."),
}


def exit_code_for(exc: BaseException) -> int:
    """Exit code of the CLI for an exception: its class's ``exit_code`` (vfl.exceptions), 2 for a click usage
    error, 1 for anything else (see the module docstring)."""
    if isinstance(exc, click.UsageError):
        return 2
    if isinstance(exc, VFLError):
        return int(type(exc).exit_code)
    return 1


class LazyGroup(click.Group):
    """A click group whose commands are imported on first use (click's documented ``LazyGroup`` pattern); commands
    added with ``add_command`` (or ``@cli.command``) are served as by any group."""

    def __init__(self, *args: Any, lazy_commands: dict[str, tuple[str, str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = lazy_commands

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self.lazy_commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy_commands:
            module, attribute, _ = self.lazy_commands[cmd_name]
            command = getattr(importlib.import_module(module), attribute)
            if not isinstance(command, click.Command) or command.name != cmd_name:
                raise RuntimeError(f"{module}.{attribute} is not the click command {cmd_name!r}")
            self.add_command(command)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list from the table's summaries: ``vfl --help`` imports no command module."""
        names = [n for n in self.list_commands(ctx) if n in self.commands or n in self.lazy_commands]
        if not names:
            return
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = []
        for name in names:
            if name in self.commands:
                cmd = self.commands[name]
                if cmd.hidden:
                    continue
                rows.append((name, cmd.get_short_help_str(limit)))
            else:
                rows.append((name, click.utils.make_default_short_help(self.lazy_commands[name][2], limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
    click.echo(f"vfl: warning: {message}", err=True)


@click.group(cls=LazyGroup, lazy_commands=COMMANDS,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110},
             epilog=f"Secure-product inner loops: {INNER_LOOPS}.")
@click.version_option(package_name="vfl", message=f"%(prog)s %(version)s; inner loops: {INNER_LOOPS}")
def cli() -> None:
    """Differentially private linear/logistic regression on vertically partitioned data.

    Start one `vfl coordinator` and one `vfl party` per organisation; or try `vfl demo`.
    """


# ---------------------------------------------------------------------------------------------- entry point
class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C: the coordinator sends ABORT, a party reports to the coordinator."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated("terminated by SIGTERM")


def _end_children() -> None:
    """Kill this process's pool workers (they would also die with it: vfl.secure.fastmath.die_with_parent)."""
    import multiprocessing

    for child in multiprocessing.active_children():
        child.kill()


def main(argv: list[str] | None = None) -> int:
    """Console entry point: one readable line and a non-zero exit code on every user error."""
    import signal
    import threading

    from vfl.process_memory import fix_mmap_threshold, limit_malloc_arenas

    limit_malloc_arenas()   # before any thread: freed frame memory is reused, not kept per thread (issue 8)
    fix_mmap_threshold()    # frames are mappings of their own, unmapped when freed (issue 34)
    warnings.showwarning = _show_warning
    warnings.simplefilter("always", PrivacyLeakWarning)
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return _main(argv)
    finally:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, previous)


def _main(argv: list[str] | None) -> int:
    try:
        cli.main(args=argv, prog_name="vfl", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.exceptions.Abort as exc:  # click wraps KeyboardInterrupt (and our SIGTERM) in Abort
        _end_children()
        cause = exc.__cause__ or exc.__context__
        click.echo(f"vfl: {'terminated' if isinstance(cause, Terminated) else 'interrupted'}", err=True)
        return 130
    except click.ClickException as exc:
        click.echo(f"vfl: error: {exc.format_message()}", err=True)
        return exc.exit_code if exc.exit_code else 2
    except VFLError as exc:
        # an error may quote a peer's text: printed printable, on one line, bounded
        from vfl.net.notices import shown
        click.echo(f"vfl: error: {shown(exc, limit=10_000)}", err=True)
        return exit_code_for(exc)
    except KeyboardInterrupt as exc:
        _end_children()
        click.echo(f"vfl: {'terminated' if isinstance(exc, Terminated) else 'interrupted'}", err=True)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
