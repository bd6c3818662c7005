"""The ``coba`` config group, its composition on top of veRL's ppo_trainer, and its refusals (veRL's own
start-up conditions: test_verl_trainer_start.py, test_verl_separate_async_start.py)."""

from __future__ import annotations

import copy
import dataclasses
import os
import subprocess
import sys
from importlib import resources

import pytest
from omegaconf import OmegaConf

from coba_verl.core import group_weight
from coba_verl.core.config import CobaConfig
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
    """A GPU launch's config: it names its rollout engine (mandatory, ``???`` in veRL's yaml)."""
    return coba_compose([*gpu_1x8, "actor_rollout_ref.rollout.name=vllm"])


@pytest.mark.parametrize("mode", ["sync", "colocate_async", "separate_async"])
def test_each_supported_v1_mode_is_sent_to_its_registered_coba_trainer(base_1x8, mode, cupy_installed):
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


def test_the_stock_main_ppo_route_names_an_unset_rollout_engine_before_any_worker(coba_compose, gpu_1x8):
    """Under veRL's own launcher CobaTrainer's constructor is the first check of ours: a launch
    without ``actor_rollout_ref.rollout.name`` is refused there, naming it, not in a worker."""
    from coba_verl.verl_plugin.hooks.trainer import CobaTrainer

    config = coba_compose(gpu_1x8)
    OmegaConf.update(config, "trainer.v1.trainer_mode", COBA_TRAINER_MODE)
    with pytest.raises(
        ValueError, match=r"unset \(\?\?\?\) that this run reads: actor_rollout_ref\.rollout\.name \("
    ):
        CobaTrainer(config)


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
