"""`coba-verl` dispatches to its sub-commands and refuses unknown ones."""

from __future__ import annotations

import pytest

from coba_verl import cli


def test_help_lists_every_command(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in cli.COMMANDS:
        assert f"  {name}" in out


def test_unknown_command_exits_2_naming_it(capsys):
    assert cli.main(["trian"]) == 2
    assert "unknown command 'trian'" in capsys.readouterr().err


def test_data_command_reaches_the_data_cli(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["data", "--help"])
    assert exc.value.code == 0
    assert "--output-dir" in capsys.readouterr().out


def test_every_command_module_exposes_main():
    import importlib

    for module_name, _ in cli.COMMANDS.values():
        assert callable(importlib.import_module(module_name).main)
