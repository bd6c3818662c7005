"""Every refusal of ``python -m coba_verl.openrlhf.train``, through OpenRLHF's real argument parser.

A refused setting stops the launch with one line naming the flag, exit status 2, before Ray starts.
"""

from __future__ import annotations

from pathlib import Path
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
        (  # the decisive reason, with OpenRLHF 0.11.2's lines
            ["--train.async_enable"],
            "--train.async_enable is not supported",
            "runs PPOTrainerAsync (cli/train_ppo_ray.py:145-146), whose GenerateSamplesActor builds "
            "OpenRLHF's own SamplesGenerator (trainer/ppo_trainer_async.py:58-64), so the budgets would be "
            "silently ignored",
        ),
        (
            ["--train.async_enable", "--train.partial_rollout_enable"],
            "--train.async_enable with --train.partial_rollout_enable is not supported",
            "(ppo_trainer_async.py:255-265, vllm_engine.py:130-131), so a sample's tokens may come from two "
            "policy versions",
        ),
        (  # refused before OpenRLHF's own assert that it needs async
            ["--train.partial_rollout_enable"],
            "--train.partial_rollout_enable is not supported",
            "Partial rollout (a mode of async, cli/train_ppo_ray.py:717-718)",
        ),
        (
            ["--algo.dynamic_filtering_enable", "--algo.dynamic_filtering_range", "0", "1"],
            "--algo.dynamic_filtering_enable",
            "outside the round's allocation (samples_generator.py:168-191); the dropped group's scores never "
            "reach the tracker",
        ),
        (["--vllm.num_engines", "0"], "--vllm.num_engines=0", "Set --vllm.num_engines 1 or more"),
        (["--coba.max_rollouts", "3"], "--coba.max_rollouts=3", "mean budget per prompt"),
        (["--coba.min_rollouts", "1"], "coba.min_rollouts=1", "has no baseline"),
        (["--coba.strategy", "greedy"], "coba.strategy='greedy'", "choose one of"),
        (["--coba.prior_file", "no.jsonl"], "--coba.prior_file='no.jsonl' does not exist", "estimate"),
        (["--coba.budget_unit", "tokens"], "--coba.budget_unit='tokens'", "not supported in OpenRLHF"),
        (["--coba.skip_spread_below", "0.1"], "--coba.skip_spread_below=0.1", "not supported in OpenRLHF"),
        (["--coba.size_refills", "true"], "--coba.size_refills=True", "not supported in OpenRLHF"),
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
    from coba_verl.core.group_weight import check_aggregation
    from coba_verl.openrlhf.checks import GROUP_WEIGHT_MODES

    def check_group_weight_mode(group_weight, mode):
        check_aggregation(group_weight, mode, GROUP_WEIGHT_MODES)

    with caplog.at_level("INFO", logger="coba_verl.core.group_weight"):
        check_group_weight_mode("equal", "seq-mean-token-mean")
        assert not caplog.records
        check_group_weight_mode("equal", "token-mean")  # OpenRLHF's default: the length weighting stays
    assert [r.levelname for r in caplog.records] == ["INFO"]
    assert "mean response length" in caplog.records[0].getMessage()
    check_group_weight_mode("proportional", "seq-mean-token-sum")  # proportional changes nothing: any mode
    with pytest.raises(ValueError, match="loss_agg_mode='seq-mean-token-sum'"):
        check_group_weight_mode("equal", "seq-mean-token-sum")


def fake_cli(monkeypatch, *, parse: bool, build: bool) -> list:
    """``runpy.run_module`` replaced by a CLI that does what OpenRLHF's train_ppo_ray does with the
    two names the entry point stands in for: parse through ``hierarchize`` (``parse``) and build the
    trainer from ``openrlhf.trainer.ppo_trainer.PPOTrainer`` (``build``), or not. Returns the
    trainers built, recorded instead of starting a Ray actor."""
    import argparse
    import runpy

    import coba_verl.openrlhf.trainer as coba_trainer

    built: list = []
    monkeypatch.setattr(coba_trainer.CobaPPOTrainer, "remote", lambda *a, **k: built.append(a) or "actor")

    def train_ppo_ray(*args, **kwargs):
        import openrlhf.trainer.ppo_trainer as ppo_trainer
        import openrlhf.utils.config as config

        flat = argparse.Namespace(**{"train.async_enable": False, "train.partial_rollout_enable": False})
        flat.__dict__["algo.dynamic_filtering_enable"] = False
        flat.__dict__.update({"actor.loss_agg_mode": "seq-mean-token-mean", "vllm.num_engines": 1})
        flat.__dict__.update({"rollout.n_samples_per_prompt": 4, "rollout.batch_size": 4})
        flat.__dict__["rollout.vllm_generate_batch_size"] = None
        args = config.hierarchize(flat) if parse else SimpleNamespace()
        if build:
            assert ppo_trainer.PPOTrainer.remote("model", SimpleNamespace(args=args)) == "actor"

    monkeypatch.setattr(runpy, "run_module", train_ppo_ray)
    return built


def test_the_cli_runs_with_coba_checks_and_trainer_in_place_then_gets_its_own_back(orl, monkeypatch):
    import openrlhf.trainer.ppo_trainer as ppo_trainer
    import openrlhf.utils.config as config

    from coba_verl.openrlhf.train import main

    upstream = config.hierarchize, ppo_trainer.PPOTrainer
    built = fake_cli(monkeypatch, parse=True, build=True)
    main(["--coba.strategy", "uniform"])
    ((pretrain, strategy),) = built
    assert pretrain == "model" and strategy.args.coba["config"]["strategy"] == "uniform"
    assert (config.hierarchize, ppo_trainer.PPOTrainer) == upstream


@pytest.mark.parametrize(
    ("parse", "why"),
    [(True, "never used"), (False, "did not pass openrlhf.utils.config.hierarchize")],
)
def test_a_cli_that_goes_around_the_stand_ins_is_refused_not_silently_trained(
    orl, monkeypatch, capsys, parse, why
):
    """Checked by what OpenRLHF's CLI does, not by reading its source: a trainer built from arguments
    that skipped the coba checks, or a run that never built coba-verl's trainer (the budgets would
    not be used), is one ``coba-verl:`` line naming OpenRLHF's version, exit 2."""
    from coba_verl.openrlhf.train import main

    built = fake_cli(monkeypatch, parse=parse, build=not parse)
    with pytest.raises(SystemExit) as exit_info:
        main([])
    assert exit_info.value.code == 2 and not built
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("coba-verl: OpenRLHF") and why in line and "pip install 'openrlhf==0.11.2'" in line


def test_api_check_covers_the_parser_function_the_entry_point_stands_in_for(orl, monkeypatch):
    import openrlhf.utils.config as config

    from coba_verl.framework_api import FrameworkMismatch
    from coba_verl.openrlhf.checks import check_openrlhf_api

    monkeypatch.setattr(config, "hierarchize", lambda flat, prefix: flat)
    with pytest.raises(FrameworkMismatch, match=r"openrlhf.utils.config.hierarchize\(flat, prefix\) differs"):
        check_openrlhf_api()


def test_a_refusal_of_the_trainer_constructor_is_raised_by_the_drivers_first_call(orl, monkeypatch):
    """Ray reports an actor constructor's error as ActorDiedError, the error only as text: the trainer
    keeps the refusal and raises it from `get_max_steps` (train_ppo_ray's first call), whose task error
    carries it whole to the entry point's one line. An error that is not a refusal still raises."""
    from coba_verl.openrlhf.trainer import CobaPPOTrainerClass, _UpstreamPPOTrainer
    from coba_verl.refusal import CobaRefusal

    monkeypatch.setattr(_UpstreamPPOTrainer, "__init__", lambda self, *args, **kwargs: None)
    refusal = CobaRefusal("--data.prompt_dataset has no column 'prompt_id'")

    def install(self, *args):
        raise refusal

    monkeypatch.setattr(CobaPPOTrainerClass, "_install_coba", install)
    built = CobaPPOTrainerClass("model", SimpleNamespace(), None, None, None, None, None)
    with pytest.raises(CobaRefusal) as raised:
        built.get_max_steps()
    assert raised.value is refusal

    def bug(self, *args):
        raise KeyError("coba")

    monkeypatch.setattr(CobaPPOTrainerClass, "_install_coba", bug)
    with pytest.raises(KeyError):
        CobaPPOTrainerClass("model", SimpleNamespace(), None, None, None, None, None)


#: The OpenRLHF 0.11.2 lines the async, partial-rollout and dynamic-filtering refusals cite (in their
#: messages and in docs/openrlhf.md), each with text that must be there.
CITED = [
    (
        "cli/train_ppo_ray.py",
        145,
        146,
        "from openrlhf.trainer.ppo_trainer_async import PPOTrainerAsync as PPOTrainer",
    ),
    ("trainer/ppo_trainer_async.py", 58, 64, "self.samples_generator = SamplesGenerator("),
    ("trainer/ppo_trainer_async.py", 110, 110, "global_step = self.rollout_slots.get(block=True)"),
    ("trainer/ppo_trainer_async.py", 229, 230, "self.rollout_slots.put(global_step, block=True)"),
    ("trainer/ppo_trainer_async.py", 292, 297, "self.rollout_slots = Queue(maxsize=queue_size)"),
    (
        "trainer/ppo_trainer_async.py",
        255,
        265,
        'batch_vllm_engine_call(self.vllm_engines, "pause_generation")',
    ),
    ("trainer/ray/vllm_engine.py", 130, 131, 'await self.llm.pause_generation(mode="keep")'),
    ("cli/train_ppo_ray.py", 717, 718, "--train.partial_rollout_enable requires --train.async_enable"),
    ("cli/train_ppo_ray.py", 740, 744, "--rollout.vllm_generate_batch_size > --rollout.batch_size requires"),
    ("trainer/ppo_utils/samples_generator.py", 168, 191, "# Dispatch replacement for filtered prompt."),
    ("trainer/ppo_utils/samples_generator.py", 100, 100, "chunk_size = self.args.rollout.batch_size *"),
    (
        "trainer/ppo_utils/samples_generator.py",
        131,
        133,
        "rollout_samples = self._sample_buffer[:chunk_size]",
    ),
]


@pytest.mark.parametrize(("path", "first", "last", "text"), CITED, ids=[f"{c[0]}:{c[1]}" for c in CITED])
def test_the_refusals_cite_openrlhf_0_11_2_where_it_does_what_they_say(path, first, last, text):
    site = Path(__file__).resolve().parents[2] / ".openrlhf-site"
    if not (site / "openrlhf-0.11.2.dist-info").is_dir():
        pytest.skip("OpenRLHF 0.11.2 is not installed in .openrlhf-site")
    lines = (site / "openrlhf" / path).read_text(encoding="utf-8").splitlines()[first - 1 : last]
    assert text in "\n".join(lines)
