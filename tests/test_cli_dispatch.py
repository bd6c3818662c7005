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


def test_summary_command_summarises_a_file_loggers_metrics(tmp_path, capsys):
    import json

    rows = [{"step": 0, "data": {"val-core/t/acc/mean@4": 0.25}},
            {"step": 1, "data": {"coba/budget_min": 2.0, "coba/budget_max": 6.0, "coba/budget_mean": 4.0,
                                 "coba/budget_std": 1.0, "coba/prompts": 4.0}}]  # fmt: skip
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert cli.main(["summary", str(metrics)]) == 0
    out = capsys.readouterr().out
    assert "step   1: B 2-6" in out and "0.250 before training" in out


def test_plan_command_reaches_the_planner_and_needs_no_extra(monkeypatch, capsys):
    import importlib.util

    # Nothing but numpy: plan runs where no extra is installed.
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: real(n, *a) if n == "numpy" else None)
    assert cli.missing_extra("plan") is None
    assert cli.main(["plan", "--pass-rates", "0.2,0.4", "--prompts", "2", "--n", "4"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("coba-verl plan: M=2 prompts x n=4") and "groups without reward spread" in out
    assert cli.main(["plan", "--pass-rates", "0.2,0.4", "--prompts", "0", "--n", "4"]) == 2
    assert capsys.readouterr().err.startswith("coba-verl plan: prompts=0 must be >= 1")
    with pytest.raises(SystemExit) as exc:
        cli.main(["plan", "--help"])
    assert exc.value.code == 0 and capsys.readouterr().out.startswith("usage: coba-verl plan ")


def test_every_command_module_exposes_main():
    import importlib

    for module_name, _ in cli.COMMANDS.values():
        assert callable(importlib.import_module(module_name).main)


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_flag_prints_the_installed_version(flag, capsys):
    from importlib import metadata

    import coba_verl

    assert cli.main([flag]) == 0
    assert capsys.readouterr().out == f"coba-verl {coba_verl.__version__}\n"
    assert coba_verl.__version__ == metadata.version("coba-verl")  # pyproject and package agree


def test_data_help_names_the_coba_verl_command(capsys):
    with pytest.raises(SystemExit):
        cli.main(["data", "--help"])
    assert capsys.readouterr().out.startswith("usage: coba-verl data ")


def test_train_help_is_our_short_usage_with_every_coba_key_and_imports_no_verl():
    import dataclasses
    import subprocess
    import sys

    from coba_verl.core.config import CobaConfig
    from coba_verl.verl_plugin.launch.config_bridge import VERL_DEFAULTS

    code = (
        "import sys; from coba_verl import cli; cli.main(['train', '--help']); print('verl' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert out[0] == "usage: coba-verl train [--cpu] [KEY=VALUE ...]" and out[-1] == "False"
    assert len(out) < 50
    for f in dataclasses.fields(CobaConfig):
        value = VERL_DEFAULTS.get(f.name, f.default)  # the yaml's, where veRL resolves it
        default = "null" if value is None else str(value)
        default = default.lower() if isinstance(value, bool) else default  # as the yaml spells it
        assert any(
            line.split()[0] == f"coba.{f.name}={default}" for line in out if line.startswith("  coba.")
        ), f
    assert any("coba-verl train --help-full" in line for line in out)
    assert cli.main(["train", "-h"]) == 0


@pytest.mark.parametrize(
    ("args", "hydra_argv"),
    [
        (["--help-full", "coba.kappa=7"], ["--help", "coba.kappa=7"]),  # veRL's whole config
        (["--cpu", "coba.strategy=uniform"], ["+coba_cpu=cpu", "coba.strategy=uniform"]),  # CPU backend group
    ],
)
def test_train_flags_reach_hydra_translated(monkeypatch, args, hydra_argv):
    import sys
    import types

    seen = []
    fake = types.SimpleNamespace(main=lambda: seen.append(list(sys.argv)))
    monkeypatch.setattr(sys, "argv", ["coba-verl"])
    monkeypatch.setattr(cli.importlib, "import_module", lambda name: fake)
    assert cli.main(["train", *args]) == 0
    assert seen == [["coba-verl train", *hydra_argv]]


def test_coba_keys_follow_cobaconfig_fields_in_order():
    import dataclasses

    from coba_verl.core.config import CobaConfig

    assert [k for k, _, _ in cli.coba_keys()] == [f.name for f in dataclasses.fields(CobaConfig)]


def test_a_command_whose_extra_is_missing_names_the_extra(monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "verl" else real(n, *a))
    assert cli.main(["train", "x=1"]) == 1
    assert 'pip install -e ".[verl]"' in capsys.readouterr().err


def test_estimate_hands_its_flags_to_itself_and_the_rest_to_hydra(monkeypatch, tmp_path):
    import sys

    from coba_verl.verl_plugin import estimate

    seen = []
    monkeypatch.setattr(estimate, "_entry", lambda: seen.append((estimate._REQUEST, list(sys.argv))))
    monkeypatch.setattr(sys, "argv", ["coba-verl"])
    out = tmp_path / "priors.jsonl"
    assert cli.main(["estimate", "--output", str(out), "--cpu", "--samples", "3", "coba.kappa=7"]) == 0
    ((request, argv),) = seen
    assert (request.output, request.samples) == (out, 3)
    assert argv == ["coba-verl estimate", "+coba_cpu=cpu", "coba.kappa=7"]


def test_estimate_prints_a_refusal_as_one_line_and_exits_2(tmp_path):
    """`coba-verl estimate` runs under the same `exit_on_refusal` as `coba-verl train`."""
    import os
    import subprocess
    import sys

    missing = tmp_path / "missing.parquet"
    done = subprocess.run(
        [sys.executable, "-m", "coba_verl.cli", "estimate", "--output", str(tmp_path / "p.jsonl"),
         f"data.train_files={missing}", f"data.val_files={missing}"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={**os.environ, "HYDRA_FULL_ERROR": "1"},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    ours = [line for line in done.stderr.splitlines() if line.startswith("coba-verl:")]
    assert ours == [done.stderr.splitlines()[-1]] and "missing.parquet does not exist" in ours[0]
    assert "Traceback" not in done.stderr
