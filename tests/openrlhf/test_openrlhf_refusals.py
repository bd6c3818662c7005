"""Every refusal of ``python -m coba_verl.openrlhf.train``, through OpenRLHF's real argument parser.

A refused setting stops the launch with one line naming the flag, exit status 2, before Ray starts.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest


def refusal(orl, tiny_run, tmp_path, capsys, extra: list[str]) -> str:
    from coba_verl.openrlhf.train import main

    flags = tiny_run.openrlhf_flags(
        {"model": tmp_path / "m", "data": tmp_path / "d.jsonl", "reward": tmp_path / "r.py"}, tmp_path
    )
    with pytest.raises(SystemExit) as exit_info:
        main([*flags, *extra])
    assert exit_info.value.code == 2
    import ray

    assert not ray.is_initialized()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("coba-verl: ")
    return err[0]


@pytest.mark.parametrize(
    ("extra", "flag", "why"),
    [
        (["--train.async_enable"], "--train.async_enable", "builds OpenRLHF's own SamplesGenerator"),
        (
            ["--algo.dynamic_filtering_enable", "--algo.dynamic_filtering_range", "0", "1"],
            "--algo.dynamic_filtering_enable",
            "outside the round's allocation",
        ),
        (["--vllm.num_engines", "0"], "--vllm.num_engines=0", "Set --vllm.num_engines 1 or more"),
        (["--coba.max_rollouts", "3"], "--coba.max_rollouts=3", "mean budget per prompt"),
        (["--coba.min_rollouts", "1"], "coba.min_rollouts=1", "has no baseline"),
        (["--coba.strategy", "greedy"], "coba.strategy='greedy'", "choose one of"),
        (["--coba.prior_file", "no.jsonl"], "--coba.prior_file='no.jsonl' does not exist", "estimate"),
        (["--coba.budget_unit", "tokens"], "--coba.budget_unit='tokens'", "not supported in OpenRLHF"),
    ],
)
def test_refused_settings_name_the_flag(orl, tiny_run, tmp_path, capsys, extra, flag, why):
    line = refusal(orl, tiny_run, tmp_path, capsys, extra)
    assert flag in line and why in line


def test_a_prior_file_the_trainer_would_refuse_is_refused_before_ray_starts(orl, tiny_run, tmp_path, capsys):
    """Read with the trainer's reader (`read_prior_file`), so a bad record is one line before Ray."""
    priors = tmp_path / "priors.jsonl"
    priors.write_text('{"index": 10, "pass_rate": 1.5}\n')
    line = refusal(orl, tiny_run, tmp_path, capsys, ["--coba.prior_file", str(priors)])
    assert line.startswith(f"coba-verl: --coba.prior_file: file {priors}: the prior pass rate of index 10 is")


def test_unknown_coba_flag_is_an_argparse_error(orl):
    from coba_verl.openrlhf.train import parse_coba_flags

    with pytest.raises(SystemExit):
        parse_coba_flags(["--coba.kapa", "3"])
    cfg, id_key, rest = parse_coba_flags(["--coba.tau", "none", "--coba.kappa", "7", "--x.y", "1"])
    assert (cfg.tau, cfg.kappa, id_key, rest) == (None, 7.0, "prompt_id", ["--x.y", "1"])


def strategy_for(path, **data):
    ns = SimpleNamespace
    args = ns(
        data=ns(prompt_dataset=str(path), prompt_probs=None, max_samples=1e8, prompt_split="train", **data),
        train=ns(seed=0),
    )
    return ns(args=args, print=lambda *a: None, is_rank_0=lambda: True)


def test_prompt_ids_come_from_the_id_column_not_the_text(orl, tmp_path):
    from coba_verl.openrlhf.trainer import prompt_id_map

    path = tmp_path / "p.jsonl"
    path.write_text('{"input": "1+1=", "prompt_id": 7}\n{"input": "1+1=", "prompt_id": 3}\n')
    id_map, ids = prompt_id_map(strategy_for(path), 2, "prompt_id")
    assert id_map.num_prompts == 2 and ids.tolist() == [1, 0]  # same text, two prompts


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ('{"input": "a", "prompt_id": 1}\n{"input": "b", "prompt_id": 1}\n', "rows 0 and 1 both have"),
        ('{"input": "a"}\n{"input": "b"}\n', "has no column 'prompt_id'"),
    ],
)
def test_prompt_id_column_refusals(orl, tmp_path, rows, message):
    from coba_verl.openrlhf.trainer import prompt_id_map

    path = tmp_path / "p.jsonl"
    path.write_text(rows)
    with pytest.raises(ValueError, match=message):
        prompt_id_map(strategy_for(path), 2, "prompt_id")


def test_priors_seed_the_tracker_from_the_prompt_column_and_a_file_keyed_by_its_ids(orl, tmp_path):
    """The same records as veRL and TRL (`seed_from_table`): a row's pass_rate counts as prior_weight
    attempts, a file's record is keyed by the id column and wins for a prompt in both."""
    from coba_verl.core import BudgetAllocator, CobaConfig
    from coba_verl.openrlhf.trainer import prompt_id_map, prompt_rows
    from coba_verl.records.priors import seed_from_table

    path = tmp_path / "p.jsonl"
    path.write_text(
        '{"input": "a", "prompt_id": 7, "pass_rate": 0.25}\n'
        '{"input": "b", "prompt_id": 3, "pass_rate": null}\n'
        '{"input": "c", "prompt_id": 5, "pass_rate": 1.0}\n'
    )
    priors = tmp_path / "priors.jsonl"
    priors.write_text(
        '{"index": 3, "successes": 1, "attempts": 2}\n{"index": 5, "successes": 0, "attempts": 4}\n'
    )
    rows = prompt_rows(strategy_for(path))
    id_map, ids = prompt_id_map(strategy_for(path), 3, "prompt_id", rows)
    allocator = BudgetAllocator(CobaConfig(max_rollouts=8), id_map.num_prompts)
    applied = seed_from_table(allocator.tracker, id_map, "pass_rate", str(priors), 8, rows, "prompt_id")
    assert applied["prior_prompts"] == 3
    result = allocator.allocate(ids, 12)  # rows in dataset order: ids of 7, 3, 5
    assert result.pass_rates.tolist() == [0.25, 0.5, 0.0]  # 7 from its row; 3 and 5 from the file
    assert len(set(result.budgets.tolist())) > 1  # the first round is not uniform
    assert seed_from_table(allocator.tracker, id_map, None, None, 8, rows, "prompt_id") is None


def test_api_check_names_a_changed_method(orl, monkeypatch):
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    from coba_verl.openrlhf.checks import check_openrlhf_api

    check_openrlhf_api()
    monkeypatch.setattr(SamplesGenerator, "generate_samples", lambda self, batch: None)
    with pytest.raises(ImportError, match=r"SamplesGenerator.generate_samples\(self, batch\) differs"):
        check_openrlhf_api()
    monkeypatch.delattr(SamplesGenerator, "generate_samples")
    with pytest.raises(ImportError, match="generate_samples does not exist"):
        check_openrlhf_api()


def test_group_weight_is_exact_or_said_at_info_for_the_modes_openrlhf_parses_else_refused(orl, caplog):
    from coba_verl.openrlhf.checks import check_group_weight_mode

    with caplog.at_level("INFO", logger="coba_verl.core.group_weight"):
        check_group_weight_mode("equal", "seq-mean-token-mean")
        assert not caplog.records
        check_group_weight_mode("equal", "token-mean")  # OpenRLHF's default: the length weighting stays
    assert [r.levelname for r in caplog.records] == ["INFO"]
    assert "mean response length" in caplog.records[0].getMessage()
    check_group_weight_mode("proportional", "seq-mean-token-sum")  # proportional changes nothing: any mode
    with pytest.raises(ValueError, match="loss_agg_mode='seq-mean-token-sum'"):
        check_group_weight_mode("equal", "seq-mean-token-sum")
