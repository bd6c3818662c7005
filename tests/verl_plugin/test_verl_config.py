"""The ``coba`` config group, its composition on top of veRL's ppo_trainer, and every refusal."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import os
import re
import subprocess
import sys
from importlib import resources
from types import SimpleNamespace

import pytest
import yaml
from hydra.errors import InstantiationException
from omegaconf import OmegaConf

from coba_verl.core import group_weight
from coba_verl.core.config import CobaConfig
from coba_verl.refusal import CobaRefusal
from coba_verl.verl_plugin.launch.config_bridge import VERL_DEFAULTS, check_config, coba_config_from
from coba_verl.verl_plugin.main import prepare_config
from coba_verl.verl_plugin.verl_names import COBA_TRAINER_MODE

# One non-default value per CobaConfig field; a new field must be added here (and to the yaml).
NON_DEFAULT_OVERRIDES = {
    "strategy": ("static", "static"),  # budget_unit=tokens needs a strategy with a Beta value
    "min_rollouts": ("4", 4),
    "max_rollouts": ("64", 64),
    "kappa": ("7", 7.0),
    "window": ("1", 1),
    "tau": ("5.0", 5.0),
    "solver": ("heap", "heap"),
    "success_value": ("2.0", 2.0),
    "unseen_pass_rate": ("0.4", 0.4),
    "p_clip_low": ("0.05", 0.05),
    "p_clip_high": ("0.95", 0.95),
    "static_alpha": ("3.0", 3.0),
    "static_beta": ("6.0", 6.0),
    "prior_field": ("extra_info.pass_count/extra_info.attempts", "extra_info.pass_count/extra_info.attempts"),
    "prior_file": ("/data/priors.jsonl", "/data/priors.jsonl"),
    "prior_weight": ("4", 4),
    "group_weight": ("proportional", "proportional"),
    "budget_unit": ("tokens", "tokens"),
    "cut_sessions": ("spread", "spread"),
    "skip_spread_below": ("0.2", 0.2),
    "skip_explore": ("0.3", 0.3),
    "size_refills": ("true", True),
}
#: Fields set in a config of their own: the skip and C-size need DAPO, which the token budget above refuses.
APART = {
    "skip_spread_below": ("algorithm.filter_groups.enable=true",),
    "size_refills": ("algorithm.filter_groups.enable=true",),
}


def test_coba_yaml_mirrors_cobaconfig_keys_and_defaults():
    yaml_node = OmegaConf.load(resources.files("coba_verl") / "config" / "coba" / "default.yaml")
    from_yaml = OmegaConf.to_container(yaml_node)
    defaults = dataclasses.asdict(CobaConfig())
    assert list(from_yaml) == list(defaults), "keys (and their order) must match CobaConfig's fields"
    for key, default in defaults.items():
        expected = VERL_DEFAULTS.get(key, default)
        assert from_yaml[key] == expected, (
            f"coba.{key}: yaml has {from_yaml[key]!r}, CobaConfig has {default!r}"
        )
        assert type(from_yaml[key]) is type(expected), f"coba.{key}: {from_yaml[key]!r} vs {expected!r}"


def test_composed_config_passes_verl_validate_config_on_1x8_gpus(coba_compose, gpu_1x8):
    config = coba_compose(gpu_1x8)
    assert config.algorithm.adv_estimator == "grpo"
    assert config.trainer.v1.trainer_mode == "sync"
    coba = prepare_config(config)  # runs veRL's validate_config
    assert coba == CobaConfig()
    assert config.trainer.v1.trainer_mode == COBA_TRAINER_MODE


def test_every_coba_field_is_overridable_from_the_command_line(coba_compose, gpu_1x8):
    assert set(NON_DEFAULT_OVERRIDES) == {f.name for f in dataclasses.fields(CobaConfig)}
    together = {k: v for k, v in NON_DEFAULT_OVERRIDES.items() if k not in APART}
    config = coba_compose(gpu_1x8 + [f"coba.{key}={text}" for key, (text, _) in together.items()])
    coba = prepare_config(config)
    for key, (_, expected) in together.items():
        assert getattr(coba, key) == expected, key
    for key, needs in APART.items():
        text, expected = NON_DEFAULT_OVERRIDES[key]
        apart = prepare_config(coba_compose([*gpu_1x8, f"coba.{key}={text}", *needs]))
        assert getattr(apart, key) == expected, key


def test_config_without_coba_node_uses_cobaconfig_defaults(coba_compose, gpu_1x8):
    config = coba_compose(gpu_1x8)
    OmegaConf.set_struct(config, False)
    del config["coba"]
    assert coba_config_from(config) == CobaConfig()


@pytest.fixture(scope="module")
def base_1x8(coba_compose, gpu_1x8):
    return coba_compose(gpu_1x8)


@pytest.mark.parametrize("mode", ["sync", "colocate_async", "separate_async"])
def test_each_supported_v1_mode_is_sent_to_its_registered_coba_trainer(base_1x8, mode):
    from verl.trainer.ppo.v1 import get_trainer_cls

    from coba_verl.verl_plugin.hooks.trainer import (
        CobaColocateAsyncTrainer,
        CobaSeparateAsyncTrainer,
        CobaTrainer,
    )
    from coba_verl.verl_plugin.main import prepare_config

    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, "trainer.v1.trainer_mode", mode)
    if mode == "separate_async":
        for key, value in SEPARATE_ASYNC_FITS.items():
            OmegaConf.update(config, key, value)
    prepare_config(config)
    trainer_class = get_trainer_cls(config.trainer.v1.trainer_mode)
    classes = {
        "sync": CobaTrainer,
        "colocate_async": CobaColocateAsyncTrainer,
        "separate_async": CobaSeparateAsyncTrainer,
    }
    assert trainer_class is classes[mode]
    assert trainer_class.VERL_MODE == mode


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("trainer.v1.trainer_mode", "fully_async", "not a veRL V1 mode coba-verl supports"),
        ("trainer.v1.sync.parameter_sync_step", 2, "Set trainer.v1.sync.parameter_sync_step=1"),
        ("coba.min_rollouts", 1, "coba.min_rollouts=1 is below 2"),
        ("actor_rollout_ref.rollout.n", 256, "(64 * 256)=16384 is infeasible for M=64 prompts"),
        ("coba.min_rollouts", 20, "need 1280 <= total <= 8192"),
        ("coba.max_rollouts", 8, "Set actor_rollout_ref.rollout.n between 2 and 8"),
        ("algorithm.adv_estimator", "gae", "algorithm.adv_estimator=gae is not supported"),
        ("coba.strategy", "greedy", "coba.strategy='greedy' is unknown"),
        ("coba.group_weight", "even", "coba.group_weight='even' is unknown; choose one of"),
        (
            "actor_rollout_ref.rollout.full_determinism",
            True,
            "Set actor_rollout_ref.rollout.full_determinism=false",
        ),
    ],
)
def test_unworkable_configuration_is_refused_with_the_fix(base_1x8, key, value, message):
    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, key, value, force_add=True)
    with pytest.raises(ValueError) as info:
        prepare_config(config)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("mode", "warned"),
    [("seq-mean-token-mean", False), ("token-mean", True), ("seq-mean-token-sum-norm", True)],
)
def test_equal_group_weight_says_at_info_where_groups_weigh_by_length(base_1x8, caplog, mode, warned):
    """``equal`` is the default, so veRL's default ``token-mean`` must not warn on every run."""
    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, "actor_rollout_ref.actor.loss_agg_mode", mode)
    with caplog.at_level("INFO", logger="coba_verl.core.group_weight"):
        assert check_config(config).group_weight == "equal"  # the default
    records = [r for r in caplog.records if r.name == "coba_verl.core.group_weight"]
    records = [r for r in records if "group_weight" in r.getMessage()]
    assert {r.levelname for r in records} <= {"INFO"}
    messages = [r.getMessage() for r in records]
    assert bool(messages) == warned
    if warned:
        assert f"loss_agg_mode={mode!r}" in messages[0] and "'seq-mean-token-mean'" in messages[0]


def test_equal_group_weight_is_refused_under_a_loss_agg_mode_it_does_not_know(base_1x8, caplog):
    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, "coba.group_weight", "equal")
    OmegaConf.update(config, "actor_rollout_ref.actor.loss_agg_mode", "seq-max-token-mean")
    with pytest.raises(ValueError, match="loss_agg_mode='seq-max-token-mean': coba-verl knows"):
        check_config(config)
    OmegaConf.update(config, "coba.group_weight", "proportional")  # changes nothing: any mode
    assert check_config(config).group_weight == "proportional"


def test_group_weight_old_spelling_tokens_composes_as_proportional(coba_compose, gpu_1x8, monkeypatch):
    """``coba.group_weight=tokens`` (``proportional``'s old name) still runs, with a deprecation warning."""
    monkeypatch.setattr(group_weight, "_warned_renames", set())
    overrides = ["coba.group_weight=tokens", "actor_rollout_ref.actor.loss_agg_mode=token-sum"]
    config = coba_compose([*gpu_1x8, *overrides])
    with pytest.warns(DeprecationWarning, match="coba.group_weight='tokens' is deprecated"):
        assert check_config(config).group_weight == "proportional"


def test_trainer_refuses_on_the_stock_main_ppo_route_before_building_anything(base_1x8):
    """``python -m verl.trainer.main_ppo trainer.v1.trainer_mode=coba_sync`` skips coba_verl.main's
    checks; CobaTrainer's constructor makes the same refusals inside TaskRunnerV1."""
    from coba_verl.verl_plugin.hooks.trainer import CobaTrainer

    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, "trainer.v1.trainer_mode", COBA_TRAINER_MODE)
    OmegaConf.update(config, "trainer.v1.sync.parameter_sync_step", 2, force_add=True)
    with pytest.raises(ValueError, match="Set trainer.v1.sync.parameter_sync_step=1"):
        CobaTrainer(config)
    assert config.trainer.v1.trainer_mode == COBA_TRAINER_MODE  # refused before anything was changed


@pytest.mark.parametrize(
    ("policy", "refused"),
    [("auto", False), ("none", True), ("some_other_plugin", True), ("coba_verl", False)],
)
def test_launch_refused_when_veRL_would_skip_the_plugin(policy, refused):
    """In a fresh interpreter, as veRL's Ray processes load plugins: veRL's registry decides."""
    code = "from coba_verl.verl_plugin.main import check_plugin_loaded; check_plugin_loaded()"
    env = {**os.environ, "VERL_USE_EXTERNAL_PLUGINS": policy}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert (done.returncode != 0) == refused, done.stderr[-2000:]
    if refused:
        assert f"VERL_USE_EXTERNAL_PLUGINS={policy} keeps veRL from loading the 'coba_verl'" in done.stderr


def test_launch_names_the_plugins_own_import_error_that_veRL_logs_at_debug():
    """veRL imports plugins inside try/except and logs failures at DEBUG; the launch must show
    check_verl_api's message (here: a veRL whose step() takes other parameters), not blame the install."""
    code = (
        "import os\n"
        "from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync\n"
        "PPOTrainerSync.step = lambda self, metrics: None  # a veRL with another step() signature\n"
        "os.environ['VERL_USE_EXTERNAL_PLUGINS'] = 'auto'\n"
        "from coba_verl.verl_plugin.main import check_plugin_loaded\n"
        "check_plugin_loaded()\n"
    )
    env = {**os.environ, "VERL_USE_EXTERNAL_PLUGINS": "none"}  # veRL itself skips the plugin
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    plugin = "coba_verl.verl_plugin.hooks.registration"
    assert f"coba-verl's veRL plugin ({plugin}) cannot be imported" in done.stderr
    assert "PPOTrainerSync.step(self, metrics) differs from the (self, metrics, timing_raw)" in done.stderr
    assert "VERL_USE_EXTERNAL_PLUGINS" not in done.stderr.splitlines()[-1]


def test_fresh_process_registers_the_trainer_on_import_verl_and_composes_the_cli_config():
    """What TaskRunnerV1's Ray actor sees (veRL swallows plugin import errors, so read the registry),
    and the Hydra entry point ``python -m coba_verl.main`` composing veRL's config with overrides."""
    code = (
        "import sys\n"
        "import verl\n"
        "from verl.trainer.ppo.v1.trainer_base import get_trainer_cls\n"
        f"cls = get_trainer_cls('{COBA_TRAINER_MODE}')\n"
        "print('TRAINER', cls.__module__ + '.' + cls.__name__)\n"
        "sys.argv = ['coba_verl.main', '--cfg', 'job', 'coba.strategy=uniform', 'coba.kappa=7']\n"
        "from coba_verl.verl_plugin.main import main\n"
        "main()\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=180, check=True
    )
    lines = out.stdout.splitlines()
    assert "TRAINER coba_verl.verl_plugin.hooks.trainer.CobaTrainer" in lines
    composed = OmegaConf.create(
        "\n".join(lines[lines.index("TRAINER coba_verl.verl_plugin.hooks.trainer.CobaTrainer") + 1 :])
    )
    assert composed.coba.strategy == "uniform" and composed.coba.kappa == 7
    assert composed.algorithm.adv_estimator == "grpo"
    assert composed.trainer.v1.trainer_mode == "sync"  # set to coba_sync only after the checks
    assert "actor_rollout_ref" in composed and "transfer_queue" in composed  # veRL's ppo_trainer


def test_stock_main_ppo_config_selects_the_trainer_with_plus_coba_overrides():
    """The second route: veRL's own ppo_trainer with trainer.v1.trainer_mode=coba_sync and +coba.*."""
    from hydra import compose, initialize_config_module

    overrides = [
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.rollout.n=16",
        f"trainer.v1.trainer_mode={COBA_TRAINER_MODE}",
        "+coba.strategy=knapsack",
    ]
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        config = compose(config_name="ppo_trainer", overrides=overrides)
    assert check_config(config) == CobaConfig(strategy="knapsack")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"algorithm.filter_groups.enable": True}, "DAPO dynamic sampling"),
        ({"trainer.v1.sampler.sync_refill_failed_groups": True}, "sync_refill_failed_groups=true: it trains"),
        ({"coba.strategy": "knapsack"}, "strategy='knapsack' allocates rollouts only"),
        ({"trainer.use_v1": False}, "the classic trainer"),
        ({"trainer.v1.trainer_mode": "colocate_async"}, "colocate_async: each update trains M x rollout.n"),
    ],
)
def test_token_budget_is_refused_where_a_step_must_train_m_times_n_rollouts(base_1x8, overrides, message):
    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, "coba.budget_unit", "tokens", force_add=True)
    for key, value in overrides.items():
        OmegaConf.update(config, key, value, force_add=True)
    with pytest.raises(ValueError, match=message):
        prepare_config(config)


def test_token_budget_passes_in_the_v1_trainer_without_dapo(base_1x8):
    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, "coba.budget_unit", "tokens", force_add=True)
    assert prepare_config(config).budget_unit == "tokens"


#: The options only the V1 sync trainer with DAPO takes: (key, value, as the message shows it, off).
SYNC_DAPO_OPTIONS = [
    ("coba.skip_spread_below", 0.1, "0.1", "0"),
    ("coba.size_refills", True, "true", "false"),
]


@pytest.mark.parametrize(("key", "value", "shown", "off"), SYNC_DAPO_OPTIONS)
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({}, r"Set algorithm.filter_groups.enable=true, or {key}={off}\."),
        (
            {"algorithm.filter_groups.enable": True, "trainer.v1.trainer_mode": "colocate_async"},
            r"Set trainer.use_v1=true with trainer.v1.trainer_mode=sync, or {key}={off}\.",
        ),
        (
            {"trainer.use_v1": False},
            r"with trainer.v1.trainer_mode=sync and algorithm.filter_groups.enable=true, or {key}={off}\.",
        ),
    ],
)
def test_sync_dapo_options_are_refused_outside_the_v1_sync_trainer_with_dapo(
    base_1x8, key, value, shown, off, overrides, message
):
    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, key, value, force_add=True)
    for name, setting in overrides.items():
        OmegaConf.update(config, name, setting, force_add=True)
    with pytest.raises(ValueError, match=rf"{key}={shown} needs the V1 sync trainer with DAPO"):
        prepare_config(config)
    with pytest.raises(ValueError, match=message.format(key=key, off=off)):
        prepare_config(config)


def test_the_skip_passes_in_the_v1_sync_trainer_with_dapo(base_1x8):
    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, "coba.skip_spread_below", 0.1, force_add=True)
    OmegaConf.update(config, "algorithm.filter_groups.enable", True, force_add=True)
    assert prepare_config(config).skip_spread_below == 0.1


@pytest.mark.parametrize("strategy", ["coba", "uniform"])
def test_size_refills_passes_in_the_v1_sync_trainer_with_dapo_for_any_strategy(base_1x8, strategy):
    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, "coba.size_refills", True, force_add=True)
    OmegaConf.update(config, "coba.strategy", strategy, force_add=True)
    OmegaConf.update(config, "algorithm.filter_groups.enable", True, force_add=True)
    coba = prepare_config(config)
    assert coba.size_refills is True and coba.strategy == strategy


@pytest.mark.parametrize(
    ("strategy", "dapo", "sized"),
    [
        ("coba", True, True), ("knapsack", True, False), ("static", True, False), ("reverse", True, False),
        ("coba_release", True, False), ("uniform", True, False), ("coba", False, False),
    ],
)  # fmt: skip
def test_size_refills_auto_sizes_coba_alone_under_sync_dapo(base_1x8, strategy, dapo, sized):
    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, "coba.size_refills", "auto", force_add=True)
    OmegaConf.update(config, "coba.strategy", strategy, force_add=True)
    OmegaConf.update(config, "algorithm.filter_groups.enable", dapo, force_add=True)
    assert prepare_config(config).size_refills is sized


def test_size_refills_auto_is_off_in_the_classic_trainer_without_a_refusal(base_1x8):
    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, "coba.size_refills", "auto", force_add=True)
    OmegaConf.update(config, "algorithm.filter_groups.enable", True, force_add=True)
    OmegaConf.update(config, "trainer.use_v1", False)
    assert coba_config_from(config).size_refills is False


def test_size_refills_refuses_a_string_other_than_auto_naming_the_values(base_1x8):
    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, "coba.size_refills", "yes", force_add=True)
    with pytest.raises(TypeError, match=r"coba.size_refills='yes' \(str\) must be one of true, false, auto"):
        prepare_config(config)


# ---------------------------------------------------------------- veRL's asynchronous trainers at start

#: What makes ``base_1x8`` (M = 64, ppo_mini_batch_size = 16, tensor parallel 2) a ``separate_async``
#: config: 64 = 4 (veRL's default parameter_sync_step) x 16, a standalone pool of one node of 8 GPUs
#: (veRL's default rollout.nnodes is 0), a checkpoint engine other than ``naive``.
SEPARATE_ASYNC_FITS = {
    "actor_rollout_ref.rollout.nnodes": 1,
    "actor_rollout_ref.rollout.checkpoint_engine.backend": "nccl",
}
SWITCH = "trainer.v1.separate_async.hybrid_rollout"
STEP = "trainer.v1.separate_async.parameter_sync_step"
MINI = "actor_rollout_ref.actor.ppo_mini_batch_size"


def verl_trainer(config, mode: str):
    """veRL's own trainer class for ``mode``, built on a copy of ``config``: its constructor makes
    veRL's start-up assertions and needs no Ray (Ray starts in ``init``)."""
    from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync
    from verl.trainer.ppo.v1.trainer_separate_async import PPOTrainerSeparateAsync
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    config = copy.deepcopy(config)
    OmegaConf.update(config, "trainer.v1.trainer_mode", mode)
    classes = {"sync": PPOTrainerSync, "colocate_async": PPOTrainerColocateAsync,
               "separate_async": PPOTrainerSeparateAsync}  # fmt: skip
    return classes[mode](config)


@pytest.fixture
def separate_1x8(base_1x8):
    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, "trainer.v1.trainer_mode", "separate_async")
    for key, value in SEPARATE_ASYNC_FITS.items():
        OmegaConf.update(config, key, value)
    return config


def test_a_separate_async_config_that_fits_passes_ours_and_veRLs_constructor(separate_1x8):
    check_config(copy.deepcopy(separate_1x8))
    trainer = verl_trainer(separate_1x8, "separate_async")
    assert trainer.parameter_sync_step == 4


#: One setting changed from ``separate_1x8``: (key, value, our refusal's words, the override it names,
#: veRL's error, its words). veRL's words are those of its assertion inside
#: ``PPOTrainerSeparateAsync.__init__`` (or of the switch dataclass it builds there, raised through
#: Hydra's instantiation), the same condition on the same values.
SEPARATE_ASYNC_UNFIT = [
    ("data.train_batch_size", 48,
     f"data.train_batch_size=48 must equal {STEP}=4 x {MINI}=16", f"set: {STEP}=3.",
     AssertionError, "train_batch_size must equal parameter_sync_step * ppo_mini_batch_size"),
    (MINI, 32, f"{STEP}=4 x {MINI}=32", f"set: {STEP}=2.", AssertionError, "train_batch_size must equal"),
    (STEP, 2, f"{STEP}=2 x {MINI}=16 (", f"; {MINI}=32 fits as well", AssertionError, "train_batch_size"),
    ("actor_rollout_ref.rollout.nnodes", 0, "actor_rollout_ref.rollout.nnodes=0 x n_gpus_per_node=8",
     "set: actor_rollout_ref.rollout.nnodes=1.", AssertionError, "nnodes must be > 0"),
    ("actor_rollout_ref.rollout.n_gpus_per_node", 0, "nnodes=1 x n_gpus_per_node=0",
     "set: actor_rollout_ref.rollout.n_gpus_per_node=2.", AssertionError, "n_gpus_per_node must be > 0"),
    ("actor_rollout_ref.rollout.checkpoint_engine.backend", "naive", "checkpoint_engine.backend=naive cannot",
     "set: actor_rollout_ref.rollout.checkpoint_engine.backend=nccl.", AssertionError, "nccl/nixl/mooncake"),
    ("reward.reward_model.enable", True, "reward.reward_model.enable=true needs the reward model in its own",
     "set: reward.reward_model.enable_resource_pool=true reward.reward_model.nnodes=1.", AssertionError,
     "Colocate reward model"),
    (f"{SWITCH}.switch_threshold_ratio", 1.5, "switch_threshold_ratio=1.5 is outside (0, 1]",
     f"set: {SWITCH}.switch_threshold_ratio=0.4.",
     InstantiationException, "switch_threshold_ratio must be in (0, 1]"),
    (f"{SWITCH}.switch_cost_window_size", 0, "switch_cost_window_size=0 must be positive",
     f"set: {SWITCH}.switch_cost_window_size=3.",
     InstantiationException, "switch_cost_window_size must be positive"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("key", "value", "ours", "fix", "error", "verls"),
    SEPARATE_ASYNC_UNFIT,
    ids=[c[0] for c in SEPARATE_ASYNC_UNFIT],
)
def test_separate_async_is_refused_before_ray_where_veRLs_constructor_would_stop(
    separate_1x8, key, value, ours, fix, error, verls
):
    config = copy.deepcopy(separate_1x8)
    OmegaConf.update(config, key, value)
    with pytest.raises(CobaRefusal) as refusal:
        check_config(copy.deepcopy(config))
    assert ours in str(refusal.value) and fix in str(refusal.value)
    with pytest.raises(error, match=re.escape(verls)):
        verl_trainer(config, "separate_async")
    fixed = str(refusal.value).split("To launch it, set: ")[1].rstrip(".").split()
    for override in fixed:  # the values the refusal names fit: ours and veRL's constructor pass
        fix_key, fix_value = override.split("=", 1)
        OmegaConf.update(config, fix_key, yaml.safe_load(fix_value))
    check_config(copy.deepcopy(config))
    verl_trainer(config, "separate_async")._init_resource_pool_mgr()  # the pools veRL sizes in init()


def test_hybrid_switch_with_disaggregated_rollout_is_refused_as_veRLs_constructor_does(separate_1x8):
    config = copy.deepcopy(separate_1x8)
    OmegaConf.update(config, f"{SWITCH}.enable_switch", True)
    verl_trainer(config, "separate_async")  # the switch alone is fine
    OmegaConf.update(config, "actor_rollout_ref.rollout.disaggregation.enabled", True)
    with pytest.raises(CobaRefusal, match=f"set: {re.escape(SWITCH)}.enable_switch=false"):
        check_config(copy.deepcopy(config))
    with pytest.raises(ValueError, match="enable_switch does not support rollout disaggregation"):
        verl_trainer(config, "separate_async")


def test_every_unfit_setting_is_named_in_one_refusal(base_1x8):
    """veRL's recipe values under separate_async: three unfit settings, one line naming them all."""
    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, "trainer.v1.trainer_mode", "separate_async")
    OmegaConf.update(config, "actor_rollout_ref.actor.ppo_mini_batch_size", 32)
    with pytest.raises(CobaRefusal) as refusal:
        prepare_config(config)
    message = str(refusal.value)
    assert "\n" not in message
    assert message.endswith(
        f"To launch it, set: {STEP}=2 actor_rollout_ref.rollout.nnodes=1 "
        "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl."
    )


def test_a_standalone_pool_smaller_than_one_rollout_engine_is_refused(separate_1x8):
    """veRL starts pool // (tensor x data x pipeline parallel) standalone engines and asserts nothing:
    a 1-GPU pool under tensor parallel 2 starts none, which veRL's own count shows."""
    from verl.workers.rollout.llm_server import LLMServerManager

    config = copy.deepcopy(separate_1x8)
    OmegaConf.update(config, "actor_rollout_ref.rollout.n_gpus_per_node", 1)
    pool = "of at least one rollout engine of 2 .*set: actor_rollout_ref.rollout.n_gpus_per_node=2."
    with pytest.raises(CobaRefusal, match=pool):
        check_config(copy.deepcopy(config))

    class NoServer:  # veRL's replica class, never built for 0 engines
        def __init__(self, **kwargs):
            raise AssertionError("an engine was started")

    manager = object.__new__(LLMServerManager)
    manager.rollout_config, manager.model_config = config.actor_rollout_ref.rollout, None
    manager.worker_group, manager.start_rank, manager.rollout_replica_class = None, 0, NoServer
    asyncio.run(LLMServerManager._initialize_llm_servers(manager))
    assert manager.rollout_replicas == []
    OmegaConf.update(config, "actor_rollout_ref.rollout.tensor_model_parallel_size", 1)
    check_config(copy.deepcopy(config))


@pytest.mark.parametrize(
    ("strategy", "refused"), [("fsdp2", False), ("megatron", False), ("torchtitan", True)]
)
def test_an_actor_strategy_without_veRLs_old_policy_snapshot_is_refused(separate_1x8, strategy, refused):
    """veRL's DetachActorWorker keeps separate_async's old policy in host memory for some strategies
    only; for the others it fails at the first local update, inside Ray: its first old-log-prob pass
    saves the weights (trainer_separate_async.py:202-203), which asks for the strategy's handlers."""
    from verl.experimental.separation.engine_workers import DetachActorWorker

    config = copy.deepcopy(separate_1x8)
    OmegaConf.update(config, "actor_rollout_ref.actor.strategy", strategy)
    worker = SimpleNamespace(config=config.actor_rollout_ref, _strategy_handlers=None)
    if refused:
        with pytest.raises(CobaRefusal, match=f"strategy={strategy} cannot keep the old policy") as refusal:
            check_config(copy.deepcopy(config))
        assert "fails at the first local update, as it saves the old policy" in str(refusal.value)
        with pytest.raises(NotImplementedError, match=f"Unsupported strategy: {strategy}"):
            DetachActorWorker._get_strategy_handlers(worker)
    else:
        check_config(copy.deepcopy(config))
        if strategy == "fsdp2":  # megatron's helpers need Megatron installed
            assert len(DetachActorWorker._get_strategy_handlers(worker)) == 2


def test_colocate_async_local_updates_that_do_not_divide_the_batch_are_refused_like_veRLs_first_step(
    base_1x8,
):
    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, "trainer.v1.trainer_mode", "colocate_async")
    OmegaConf.update(config, "trainer.v1.colocate_async.parameter_sync_step", 3, force_add=True)
    with pytest.raises(CobaRefusal, match="set: trainer.v1.colocate_async.parameter_sync_step=2."):
        check_config(copy.deepcopy(config))
    trainer = verl_trainer(config, "colocate_async")
    with pytest.raises(
        AssertionError, match=r"train_batch_size \(64\) must be divisible by parameter_sync_step"
    ):
        trainer.step({}, {})
    OmegaConf.update(config, "trainer.v1.colocate_async.parameter_sync_step", 2)
    check_config(copy.deepcopy(config))


@pytest.mark.parametrize("mode", ["colocate_async", "separate_async", "coba_colocate_async"])
def test_sglang_is_refused_by_name_in_the_async_modes_with_the_reason_and_vllm(separate_1x8, mode):
    config = copy.deepcopy(separate_1x8)
    OmegaConf.update(config, "trainer.v1.trainer_mode", mode)
    OmegaConf.update(config, "actor_rollout_ref.rollout.name", "sglang")
    with pytest.raises(CobaRefusal) as refusal:
        check_config(config)
    message = str(refusal.value)
    assert message.startswith(
        "actor_rollout_ref.rollout.name=sglang is refused with trainer.v1.trainer_mode="
    )
    assert (
        "async_sglang_server.py:661-676" in message and "Use actor_rollout_ref.rollout.name=vllm" in message
    )
    OmegaConf.update(config, "actor_rollout_ref.rollout.name", "vllm")
    check_config(config)
    OmegaConf.update(config, "actor_rollout_ref.rollout.name", "sglang")
    OmegaConf.update(config, "trainer.v1.trainer_mode", "sync")
    check_config(config)  # sync never aborts a request: SGLang is fine there


def test_the_start_rules_follow_veRL_0_9_1s_code_and_step_aside_for_another(
    separate_1x8, monkeypatch, caplog
):
    """Each rule stands for a piece of veRL's code, checked by its source digest: the installed veRL is
    0.9.1, so every rule applies; against another code the rule is left to veRL, with a WARNING."""
    from coba_verl.verl_plugin.launch import verl_code

    for rule, code in verl_code.VERL_START_CODE.items():
        assert verl_code.verl_source_sha256(code.path, code.qualname) == code.sha256, rule
    assert verl_code.verl_source_sha256(code.path, "PPOTrainer.no_such_method") is None
    config = copy.deepcopy(separate_1x8)
    OmegaConf.update(config, "actor_rollout_ref.rollout.checkpoint_engine.backend", "naive")
    with pytest.raises(CobaRefusal):
        check_config(copy.deepcopy(config))
    changed = verl_code.VERL_START_CODE["separate_async"]._replace(sha256="0" * 64)
    monkeypatch.setitem(verl_code.VERL_START_CODE, "separate_async", changed)
    verl_code._say_code_changed.cache_clear()
    with caplog.at_level("WARNING", logger=verl_code.__name__):
        check_config(copy.deepcopy(config))  # left to veRL, which still stops on it
    assert (
        "PPOTrainerSeparateAsync.__init__ (verl/trainer/ppo/v1/trainer_separate_async.py) is not"
        in caplog.text
    )
    verl_code._say_code_changed.cache_clear()
    with pytest.raises(AssertionError, match="nccl/nixl/mooncake"):
        verl_trainer(config, "separate_async")


# ------------------------------------------------ veRL's start-up conditions of every trainer (issue 52)

V1_HEAD = (
    "trainer.v1.trainer_mode=sync cannot start with this config; veRL would stop inside Ray, after Ray and "
    "TransferQueue have started: "
)
REWARD = "reward.reward_model"
SAMPLER = "trainer.v1.sampler"
DISAGG = "actor_rollout_ref.rollout.disaggregation"
REWARD_POOL = (
    f"{REWARD}.enable_resource_pool=true puts the reward model in its own pool of {REWARD}.nnodes=0 x "
    "n_gpus_per_node=8 devices, both of which must be above 0 (veRL's default nnodes is 0; "
)


def refusal_of(config) -> str:
    with pytest.raises(CobaRefusal) as refusal:
        check_config(copy.deepcopy(config))
    message = str(refusal.value)
    assert "\n" not in message
    return message


def test_a_reward_pool_of_no_node_is_refused_in_v1_as_veRLs_resource_pool_setup_stops(base_1x8):
    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, f"{REWARD}.enable_resource_pool", True)
    assert refusal_of(config) == (
        V1_HEAD + REWARD_POOL + f"trainer_base.py:823-827). To launch it, set: {REWARD}.nnodes=1."
    )
    with pytest.raises(ValueError, match="reward_model.nnodes must be greater than 0"):
        verl_trainer(config, "sync")._init_resource_pool_mgr()
    OmegaConf.update(config, f"{REWARD}.n_gpus_per_node", 0)
    assert refusal_of(config).endswith(f"set: {REWARD}.nnodes=1 {REWARD}.n_gpus_per_node=1.")
    OmegaConf.update(config, f"{REWARD}.nnodes", 1)
    OmegaConf.update(config, f"{REWARD}.n_gpus_per_node", 1)
    check_config(copy.deepcopy(config))
    verl_trainer(config, "sync")._init_resource_pool_mgr()


def test_a_reward_pool_of_no_node_is_refused_in_the_classic_trainer_as_its_task_runner_stops(base_1x8):
    from verl.trainer.main_ppo_v0 import BaseTaskRunner

    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, "trainer.use_v1", False)
    OmegaConf.update(config, f"{REWARD}.enable_resource_pool", True)
    assert refusal_of(config) == (
        "the classic trainer (trainer.use_v1=false) cannot start with this config; veRL would stop inside "
        f"Ray, after Ray has started: {REWARD_POOL}main_ppo_v0.py:75-79). "
        f"To launch it, set: {REWARD}.nnodes=1."
    )
    with pytest.raises(ValueError, match="reward_model.nnodes must be greater than 0"):
        BaseTaskRunner.init_resource_pool_mgr(SimpleNamespace(mapping={}), config)


DAPO_METRIC = (
    "algorithm.filter_groups.metric={}: DAPO dynamic sampling (algorithm.filter_groups.enable=true) keeps "
    "the groups whose metric varies, so veRL needs one: reward (the pre-KL reward) or a reward_extra_info "
    "field such as acc (trainer_base.py:194-196)"
)


@pytest.mark.parametrize(("metric", "shown"), [(None, "null"), ("", "''")])
def test_dapo_without_a_metric_is_refused_as_every_v1_trainers_constructor_stops(base_1x8, metric, shown):
    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, "algorithm.filter_groups.enable", True)
    OmegaConf.update(config, "algorithm.filter_groups.metric", metric)
    assert refusal_of(config) == (
        V1_HEAD + DAPO_METRIC.format(shown) + ". To launch it, set: algorithm.filter_groups.metric=reward."
    )
    for mode in ("sync", "colocate_async"):
        with pytest.raises(ValueError, match="algorithm.filter_groups.metric must be set"):
            verl_trainer(config, mode)
    OmegaConf.update(config, "algorithm.filter_groups.metric", "reward")
    check_config(copy.deepcopy(config))
    verl_trainer(config, "sync")


def test_dapo_with_a_colocated_reward_model_is_refused_as_every_v1_trainers_constructor_stops(base_1x8):
    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, "algorithm.filter_groups.enable", True)
    OmegaConf.update(config, "algorithm.filter_groups.metric", "reward")
    OmegaConf.update(config, f"{REWARD}.enable", True)
    assert refusal_of(config) == (
        V1_HEAD + f"{REWARD}.enable=true with {REWARD}.enable_resource_pool=false: DAPO dynamic sampling "
        "needs the reward at sampling time, and a colocated reward model computes it only after "
        f"(trainer_base.py:198-204). To launch it, set: {REWARD}.enable_resource_pool=true {REWARD}.nnodes=1."
    )
    with pytest.raises(AssertionError, match="requires the reward metric at sampling time"):
        verl_trainer(config, "colocate_async")
    OmegaConf.update(config, f"{REWARD}.enable_resource_pool", True)
    OmegaConf.update(config, f"{REWARD}.nnodes", 1)
    check_config(copy.deepcopy(config))
    verl_trainer(config, "colocate_async")._init_resource_pool_mgr()


@pytest.mark.parametrize(
    ("key", "value", "reason", "fix", "verls"),
    [
        ("max_off_policy_strategy", "keep", "max_off_policy_strategy=keep is not one of drop, wait "
         "(replay_buffer.py:175-177)", "max_off_policy_strategy=drop", "Invalid max off policy strategy"),
        ("max_off_policy_threshold", 0, "max_off_policy_threshold=0 is neither a positive integer nor null "
         "(replay_buffer.py:165-169)", "max_off_policy_threshold=8", "Invalid max off policy threshold"),
        ("max_off_policy_threshold", 2.5, "max_off_policy_threshold=2.5 is neither a positive integer nor "
         "null (replay_buffer.py:165-169)", "max_off_policy_threshold=8", "Invalid max off policy threshold"),
    ],
)  # fmt: skip
def test_off_policy_settings_veRLs_replay_buffer_rejects_are_refused(
    base_1x8, key, value, reason, fix, verls
):
    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, f"{SAMPLER}.{key}", value)
    assert refusal_of(config) == f"{V1_HEAD}{SAMPLER}.{reason}. To launch it, set: {SAMPLER}.{fix}."
    with pytest.raises(AssertionError, match=verls):
        verl_trainer(config, "sync")
    OmegaConf.update(config, f"{SAMPLER}.{key}", yaml.safe_load(fix.split("=")[1]))
    check_config(copy.deepcopy(config))
    OmegaConf.update(config, f"{SAMPLER}.max_off_policy_threshold", None)  # null: no bound, as veRL allows
    check_config(copy.deepcopy(config))
    verl_trainer(config, "sync")


def test_a_custom_sampler_keeps_its_own_replay_buffer_rules(base_1x8):
    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, f"{SAMPLER}.max_off_policy_strategy", "keep")
    OmegaConf.update(config, f"{SAMPLER}.custom_sampler.path", "/x/sampler.py")
    OmegaConf.update(config, f"{SAMPLER}.custom_sampler.name", "MySampler")
    check_config(copy.deepcopy(config))


BACKEND = "actor_rollout_ref.rollout.checkpoint_engine.backend"
ENGINES = "delta_sharded, kimi_ckpt_engine, mooncake, naive, nccl, nixl"


def test_a_checkpoint_engine_veRL_does_not_register_is_refused_by_name(base_1x8):
    from verl.checkpoint_engine import CheckpointEngineRegistry

    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, BACKEND, "gloo")
    assert refusal_of(config) == (
        f"{V1_HEAD}{BACKEND}=gloo is no checkpoint engine veRL registers ({ENGINES}; "
        f"checkpoint_engine/base.py:93-98). To launch it, set: {BACKEND}=naive."
    )
    with pytest.raises(ValueError, match="Checkpoint engine gloo not registered"):
        CheckpointEngineRegistry.get("gloo")
    OmegaConf.update(config, "trainer.v1.trainer_mode", "separate_async")
    OmegaConf.update(config, "actor_rollout_ref.rollout.nnodes", 1)
    assert refusal_of(config).endswith(f"To launch it, set: {BACKEND}=nccl.")  # naive is refused there
    OmegaConf.update(config, BACKEND.replace("backend", "custom_backend_module"), "my.engines")
    check_config(copy.deepcopy(config))  # a module of one's own may register it: left to veRL


def test_the_checkpoint_engines_read_from_veRLs_source_are_those_its_registry_holds():
    """Read without importing: every engine veRL's registry holds here (the others need cupy, nixl...)
    is among them, and the CPU backend adds its own, under the name the launch checks know."""
    from verl.checkpoint_engine import CheckpointEngineRegistry

    from coba_verl.cpu import CHECKPOINT_ENGINE_BACKEND
    from coba_verl.verl_plugin.launch.verl_code import verl_registrations

    names = verl_registrations("checkpoint_engine", "CheckpointEngineRegistry")
    assert ", ".join(names) == ENGINES
    assert set(CheckpointEngineRegistry._registry) - {CHECKPOINT_ENGINE_BACKEND} <= set(names)


def test_the_cpu_backends_checkpoint_engine_passes_and_others_are_named(base_1x8):
    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, "coba_cpu.enable", True, force_add=True)
    OmegaConf.update(config, BACKEND, "ray_object_store")
    check_config(copy.deepcopy(config))
    OmegaConf.update(config, BACKEND, "gloo")
    assert f"({ENGINES}, ray_object_store; checkpoint_engine/base.py:93-98)" in refusal_of(config)


def test_disaggregation_with_a_rollout_veRL_cannot_split_is_refused_as_its_rollout_config_stops(base_1x8):
    from verl.utils.config import omega_conf_to_dataclass

    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, "actor_rollout_ref.rollout.name", "hf")
    OmegaConf.update(config, f"{DISAGG}.enabled", True)
    assert refusal_of(config) == (
        f"{V1_HEAD}{DISAGG}.enabled=true needs actor_rollout_ref.rollout.name in sglang, vllm, not hf "
        f"(workers/config/rollout.py:341-344). To launch it, set: {DISAGG}.enabled=false."
    )
    with pytest.raises(InstantiationException, match=r"disaggregation.enabled=True requires rollout.name in"):
        omega_conf_to_dataclass(config.actor_rollout_ref.rollout)


def _rollout_servers(config, devices):
    """The rollout servers veRL's LLMServerManager starts on ``devices`` training devices (None: the
    standalone pool), counted without starting one."""
    from verl.workers.rollout.llm_server import LLMServerManager

    class Manager(LLMServerManager):
        rollout_replica_class = staticmethod(
            lambda **kwargs: SimpleNamespace(
                _server_handle=None, _server_address=None, init_hybrid=_nothing, init_standalone=_nothing
            )
        )

    group = None if devices is None else SimpleNamespace(world_size=devices)
    manager = Manager(config=config, worker_group=group)
    asyncio.run(manager._initialize_llm_servers())
    return len(manager.rollout_replicas)


async def _nothing(*args):
    return None


def test_training_devices_smaller_than_a_disaggregated_engine_are_refused_as_veRL_starts_no_server(base_1x8):
    config = copy.deepcopy(base_1x8)
    OmegaConf.update(config, "actor_rollout_ref.rollout.name", "vllm")
    OmegaConf.update(config, f"{DISAGG}.enabled", True)
    assert _rollout_servers(config, 8) == 2  # (2 + 2) devices an engine under tensor parallel 2
    OmegaConf.update(config, f"{DISAGG}.prefill_replicas", 4)
    assert refusal_of(config) == (
        f"{V1_HEAD}trainer.nnodes=1 x trainer.n_gpus_per_node=8 devices hold no rollout engine of 10 "
        "(disaggregated: (tensor parallel 2 x prefill_replicas 4 + decode tensor parallel 2 x "
        "decode_replicas 1) x data 1 x pipeline 1), so veRL would start no rollout server on them "
        f"(llm_server.py:434-460). To launch it, set: {DISAGG}.enabled=false."
    )
    assert _rollout_servers(config, 8) == 0


def test_a_standalone_pool_smaller_than_a_disaggregated_engine_is_refused(separate_1x8):
    """Under disaggregation an engine is (tensor parallel x prefill_replicas + decode tensor parallel x
    decode_replicas) x data x pipeline parallel devices (llm_server.py:441-454), not 1."""
    config = copy.deepcopy(separate_1x8)
    OmegaConf.update(config, "actor_rollout_ref.rollout.name", "vllm")
    OmegaConf.update(config, f"{DISAGG}.enabled", True)
    OmegaConf.update(config, "actor_rollout_ref.rollout.n_gpus_per_node", 3)
    assert refusal_of(config) == (
        "trainer.v1.trainer_mode=separate_async cannot start with this config; veRL would stop inside Ray, "
        "after Ray and TransferQueue have started: actor_rollout_ref.rollout.nnodes=1 x n_gpus_per_node=3: "
        "separate_async generates on a standalone rollout pool of that many devices besides the trainer's "
        "trainer.nnodes x trainer.n_gpus_per_node (trainer_separate_async.py:64-67), of at least one rollout "
        "engine of 4 (disaggregated: (tensor parallel 2 x prefill_replicas 1 + decode tensor parallel 2 x "
        "decode_replicas 1) x data 1 x pipeline 1; llm_server.py:434-460). To launch it, set: "
        "actor_rollout_ref.rollout.n_gpus_per_node=4."
    )
    assert _rollout_servers(config, None) == 0
    OmegaConf.update(config, "actor_rollout_ref.rollout.n_gpus_per_node", 4)
    check_config(copy.deepcopy(config))
    assert _rollout_servers(config, None) == 1
