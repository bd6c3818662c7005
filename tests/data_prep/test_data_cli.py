"""``python -m coba_verl.data``: arguments, exit status, output layout and the summary table."""

from __future__ import annotations

import logging
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from coba_verl.data import loading as loading_module
from coba_verl.data.cli import main


def test_dataset_with_split_paths_writes_each_split_and_prints_a_table(
    fixtures_dir, tmp_path, capsys
) -> None:
    status = main(
        [
            "gsm8k",
            "--output-dir",
            str(tmp_path),
            "--local-path",
            f"train={fixtures_dir / 'gsm8k_train.jsonl'}",
            "--local-path",
            f"test={fixtures_dir / 'gsm8k_test.jsonl'}",
            "-q",
        ]
    )
    assert status == 0
    assert pq.read_table(tmp_path / "train.parquet").num_rows == 5
    assert pq.read_table(tmp_path / "test.parquet").num_rows == 3
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:5] == ["dataset", "split", "read", "written", "rejected"]
    assert lines[1].split()[:6] == ["gsm8k", "train", "6", "5", "no_answer=1", "0..4"]


def test_group_writes_one_folder_per_member(fixtures_dir, tmp_path) -> None:
    status = main(
        [
            "dapo_eval",
            "--output-dir",
            str(tmp_path),
            "--local-path",
            f"aime2024={fixtures_dir / 'aime2024.jsonl'}",
            "--local-path",
            f"aime2025={fixtures_dir / 'aime2025.jsonl'}",
            "--local-path",
            f"amc23={fixtures_dir / 'amc23.jsonl'}",
            "--local-path",
            f"math500_dapo={fixtures_dir / 'math500_test.jsonl'}",
            "--local-path",
            f"minerva={fixtures_dir / 'minerva.jsonl'}",
            "--local-path",
            f"olympiadbench={fixtures_dir / 'olympiadbench.parquet'}",
            "-q",
        ]
    )
    assert status == 0
    members = ("aime2024", "aime2025", "amc23", "math500_dapo", "minerva", "olympiadbench")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(members)
    assert all((tmp_path / m / "test.parquet").exists() for m in members)


def test_strict_exits_one_when_any_row_was_rejected(fixtures_dir, tmp_path) -> None:
    args = [
        "minerva",
        "--output-dir",
        str(tmp_path / "m"),
        "--local-path",
        str(fixtures_dir / "minerva.jsonl"),
    ]
    assert main([*args, "--strict", "-q"]) == 0
    args = ["amc23", "--output-dir", str(tmp_path / "a"), "--local-path", str(fixtures_dir / "amc23.jsonl")]
    assert main([*args, "--strict", "-q"]) == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["gsm8k", "--local-path", "x.jsonl"], "write SPLIT=PATH"),
        (["gsm8k", "--local-path", "dev=x.jsonl"], "has no split 'dev'"),
        (["dapo_eval", "--local-path", "x.jsonl"], "prefix the path with a member"),
        (["dapo_eval", "--hub-id", "a/b"], "apply to one dataset, not a group"),
        (["gsm8k", "--splits", "dev"], "gsm8k has splits"),
        (["gsm8k", "extra.parquet"], "only 'check' takes files"),
        (["gsm8k", "--limit", "0"], "--limit 0: give an integer >= 1"),
        (["gsm8k", "--index-offset", "-5"], "--index-offset -5: give an integer >= 0"),
        (["nonsense"], "invalid choice"),
        (["check"], "check: give one or more parquet files"),
        (["check", "nope.parquet"], "check: no such file nope.parquet"),
    ],
)
def test_usage_errors_exit_two_with_the_fix(argv, message, tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--output-dir", str(tmp_path)])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_check_reports_collisions_with_exit_one(fixtures_dir, tmp_path, capsys) -> None:
    for name in ("gsm8k", "math"):
        main(
            [
                name,
                "--output-dir",
                str(tmp_path / name),
                "--splits",
                "train",
                "--local-path",
                f"train={fixtures_dir / f'{name}_train.jsonl'}",
                "-q",
            ]
        )
    files = [str(tmp_path / "gsm8k" / "train.parquet"), str(tmp_path / "math" / "train.parquet")]
    assert main(["check", files[0]]) == 0
    assert main(["check", *files]) == 1
    assert "extra_info.index=0 repeats" in capsys.readouterr().out


def test_check_of_a_datasets_own_train_and_test_output_passes(fixtures_dir, tmp_path, capsys) -> None:
    paths = [f"{split}={fixtures_dir / f'gsm8k_{split}.jsonl'}" for split in ("train", "test")]
    assert (
        main(["gsm8k", "--output-dir", str(tmp_path), "-q", *(a for p in paths for a in ("--local-path", p))])
        == 0
    )
    capsys.readouterr()
    assert main(["check", str(tmp_path / "train.parquet"), str(tmp_path / "test.parquet")]) == 0
    out = capsys.readouterr().out
    assert "checked 2 file(s): 0 problem(s); 0 evaluation prompt(s) also in the training files" in out


def test_group_hub_failure_prints_the_local_path_form_the_group_accepts(
    monkeypatch, fixtures_dir, tmp_path, capsys
) -> None:
    monkeypatch.setattr(loading_module, "hub_unreachable", lambda: "https://hf.example is unreachable (test)")
    assert main(["paper", "--output-dir", str(tmp_path), "-q"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("coba-verl data: error: Could not load hf://BytedTsinghua-SIA/DAPO-Math-17k")
    assert "--local-path dapo_math=FILE" in err and "Traceback" not in err
    # The printed form works: the group takes it and moves on to the next member.
    local = f"dapo_math={fixtures_dir / 'dapo_math_17k.parquet'}"
    assert main(["paper", "--output-dir", str(tmp_path), "-q", "--local-path", local]) == 1
    assert "--local-path aime2024=FILE" in capsys.readouterr().err
    assert (tmp_path / "dapo_math" / "train.parquet").exists()


def test_hub_library_warnings_do_not_also_reach_the_root_handler(fixtures_dir, tmp_path) -> None:
    # huggingface_hub and datasets print through handlers of their own; passing their records on
    # to the root handler too printed every retry warning twice.
    main(
        ["minerva", "--output-dir", str(tmp_path), "-q", "--local-path", str(fixtures_dir / "minerva.jsonl")]
    )
    assert not logging.getLogger("huggingface_hub").propagate
    assert not logging.getLogger("datasets").propagate


def test_help_names_the_command_it_was_called_as(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    assert capsys.readouterr().out.startswith("usage: coba-verl data ")


def test_module_entry_point_runs() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "coba_verl.data", "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0
    assert "dapo_math" in done.stdout and "dapo_eval" in done.stdout
    assert done.stdout.startswith("usage: python -m coba_verl.data ")


def test_check_options_work_after_the_subcommand_and_between_files(fixtures_dir, tmp_path, capsys) -> None:
    paths = [f"{split}={fixtures_dir / f'gsm8k_{split}.jsonl'}" for split in ("train", "test")]
    main(["gsm8k", "--output-dir", str(tmp_path), "-q", *(a for p in paths for a in ("--local-path", p))])
    train, test = str(tmp_path / "train.parquet"), str(tmp_path / "test.parquet")
    for argv in (["check", "--no-score-gold", train, test], ["check", train, "--no-score-gold", test]):
        assert main(argv) == 0
        assert "checked 2 file(s): 0 problem(s)" in capsys.readouterr().out
