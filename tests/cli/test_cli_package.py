"""The ``vfl/cli/`` package (issue 30): the lazy command table, exit codes carried by the exception classes and
docs/reliability.md's exit-code legend."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

import vfl.exceptions as vexc
from vfl.cli import COMMANDS, cli, exit_code_for

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_table_entry_loads_its_command_and_its_summary_is_the_commands_own(name):
    command = cli.get_command(click.Context(cli), name)
    assert isinstance(command, click.Command) and command.name == name
    assert COMMANDS[name][2] == command.get_short_help_str(limit=1000)


def test_vfl_help_imports_no_command_module():
    code = ("import sys; from vfl.cli import main; main(['--help']); "
            "print(sorted(m for m in sys.modules if m.startswith('vfl.cli.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.strip().splitlines()[-1] == "[]"
    for name in COMMANDS:
        assert re.search(rf"^  {re.escape(name)} ", out, re.M), name


def _old_exit_code_for(exc: BaseException) -> int:
    """The mapping before the codes moved onto the classes (vfl/cli.py up to issue 30)."""
    if isinstance(exc, (vexc.ConfigurationError, vexc.DataValidationError, vexc.BudgetError, click.UsageError)):
        return 2
    if isinstance(exc, vexc.PartyFailure):
        return 3
    if isinstance(exc, vexc.ProtocolError):
        return 4
    return 1


def _all_error_classes() -> list[type]:
    import vfl.net.transport  # noqa: F401  (PeerUnreachable)
    import vfl.privacy.ledger  # noqa: F401  (LedgerError)
    import vfl.protocols.alignment  # noqa: F401  (IntersectionTooSmall)

    seen, todo = [], [vexc.VFLError]
    while todo:
        cls = todo.pop()
        seen.append(cls)
        todo.extend(cls.__subclasses__())
    return seen


def test_every_error_class_keeps_the_exit_code_it_had():
    classes = _all_error_classes()
    assert len(classes) >= 15
    for cls in classes:
        exc = cls.__new__(cls)
        assert exit_code_for(exc) == _old_exit_code_for(exc) == cls.exit_code, cls.__name__
    assert exit_code_for(click.UsageError("x")) == 2 and exit_code_for(RuntimeError("x")) == 1


def test_reliability_legend_agrees_with_the_exception_classes():
    text = (ROOT / "docs" / "reliability.md").read_text(encoding="utf-8")
    legend = re.search(r"exit code \((0 ok.*?)\); \"API\"", text, re.S)
    assert legend, "docs/reliability.md lost its exit-code legend"
    codes = {int(c) for c in re.findall(r"(?:^|, |-- )(\d) ", legend.group(1).replace("\n", " "))}
    documented = codes - {0}
    carried = {cls.exit_code for cls in _all_error_classes()}
    assert documented == carried == {1, 2, 3, 4}
    for name, code in (("ConfigurationError", 2), ("DataValidationError", 2), ("BudgetError", 2),
                       ("PartyFailure", 3), ("ProtocolError", 4)):
        assert getattr(vexc, name).exit_code == code
    cli_doc = inspect.getdoc(sys.modules["vfl.cli"]) or ""
    for cls in (vexc.ConfigurationError, vexc.DataValidationError, vexc.BudgetError, vexc.PartyFailure,
                vexc.ProtocolError):
        row = re.search(rf"^(\d+) .*{cls.__name__}", cli_doc, re.M) or re.search(
            rf"^(\d+) [^\n]*\n[^\n]*{cls.__name__}", cli_doc, re.M)
        assert row and int(row.group(1)) == cls.exit_code, cls.__name__
