"""From veRL's composed config to a `CobaConfig`, and the configurations CoBA-RL refuses.

`check_config` runs in the driver (``python -m coba_verl.main``, before Ray starts) and again
in `CobaTrainer.__init__` (so the stock ``python -m verl.trainer.main_ppo
trainer.v1.trainer_mode=coba_sync`` route is guarded too). Every refusal says why and what to set.
Its notes (the UserWarning of a knob the strategy ignores, the INFO line on ``loss_agg_mode``) are
said by the first check of a config only: it marks the config (`CHECKED_KEY`), which travels to
veRL's TaskRunner with it, and a marked config is checked in silence.

The asynchronous V1 modes are checked for what veRL's own trainers would stop on once Ray and
TransferQueue run (`check_async_start`): the conditions of veRL 0.9.1's code, each checked while
that code's source digest is 0.9.1's (`VERL_START_CODE`), and left to veRL otherwise.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, NamedTuple

from omegaconf import DictConfig, OmegaConf, open_dict

from coba_verl.core.config import CobaConfig
from coba_verl.core.group_weight import AggregationModes, check_aggregation
from coba_verl.core.solvers import check_budget
from coba_verl.refusal import CobaRefusal

logger = logging.getLogger(__name__)

#: Where veRL's validation puts the held-out metrics the step line shows (``val-core/<source>/.../mean@k``).
HELD_OUT_PREFIX = "val-core/"

#: Name under which `CobaTrainer` is registered in veRL's trainer registry. veRL's trainer base
#: treats every mode other than ``sync`` as asynchronous, so `CobaTrainer` resets the config to
#: ``sync`` before veRL reads it; this name only selects the class in ``TaskRunnerV1``.
COBA_TRAINER_MODE = "coba_sync"

#: The registered CoBA trainer for each veRL V1 mode coba-verl supports (``python -m coba_verl.main``
#: sets ``trainer.v1.trainer_mode`` to it; the trainer sets the veRL name back).
COBA_MODES: dict[str, str] = {
    "sync": COBA_TRAINER_MODE,
    "colocate_async": "coba_colocate_async",
    "separate_async": "coba_separate_async",
}


#: veRL 0.9.1's ``actor.loss_agg_mode`` values by what ``coba.group_weight=equal`` does under them.
#: Exact under ``seq-mean-token-mean``: each rollout weighs 1 / R whatever its length, so a group's
#: rollouts, each scaled by (R / G) / B_g, sum to 1 / G. The others weigh each rollout by its token
#: count (token-mean: L_r / T; the others L_r up to a constant): ``equal`` removes the factor B_g,
#: but a group still weighs in proportion to its mean response length, as every group does under
#: uniform GRPO. Accepted, said at INFO (veRL's default ``token-mean`` among them). veRL 0.9.1 has no
#: other mode (``core_algos.agg_loss`` refuses any other name itself), so `check_aggregation`'s
#: refusal only meets a later veRL's new mode.
GROUP_WEIGHT_MODES = AggregationModes(
    setting="actor_rollout_ref.actor.loss_agg_mode",
    exact=("seq-mean-token-mean",),
    by_length=("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-sum-norm"),
)

#: Advantage estimators whose groups are the prompt uid, so that per-prompt group sizes are
#: meaningful (spec §1: CoBA-RL changes the group size of GRPO and nothing else).
SUPPORTED_ADV_ESTIMATORS: tuple[str, ...] = ("grpo",)


def coba_config_from(config: DictConfig) -> CobaConfig:
    """Build the `CobaConfig` from the ``coba`` node of a veRL config (dataclass defaults if absent)."""
    node = OmegaConf.select(config, "coba")
    mapping: dict[str, Any] = {} if node is None else OmegaConf.to_container(node, resolve=True)  # type: ignore[assignment]
    return CobaConfig.from_mapping(mapping)


#: Top-level key `check_config` sets (to true) in a config it has passed, so that the next checks
#: of the same config (``prepare_config`` in the driver, the trainer in veRL's TaskRunner) refuse
#: as before but do not say its notes again.
CHECKED_KEY = "coba_checked"


def check_config(config: DictConfig) -> CobaConfig:
    """Refuse veRL configurations under which per-prompt budgets cannot work; return the `CobaConfig`.

    Both trainers are checked here: V1's synchronous trainer (``trainer.use_v1=true``, with or
    without DAPO dynamic sampling) and the classic ``RayPPOTrainer`` (``trainer.use_v1=false``,
    whose own extra rules live in `coba_verl.verl_plugin.hooks.classic`). A config that passes is marked
    with `CHECKED_KEY`; checking a marked config again says no warning or INFO line (`_said_before`),
    so that each is said once a launch.

    Raises:
        ValueError: a V1 trainer mode coba-verl does not support; ``trainer.v1.sync.parameter_sync_step
            > 1``; an asynchronous mode's settings that veRL would stop on inside Ray, or SGLang there
            (`check_async_start`); a non-GRPO advantage estimator; ``coba.group_weight=equal``
            with a ``loss_agg_mode`` `GROUP_WEIGHT_MODES` does not know; a budget train_batch_size
            * rollout.n that no allocation within [min_rollouts, max_rollouts] can spend.
            `CobaConfig` itself refuses bad ``coba.*`` values (e.g. ``coba.min_rollouts < 2``).
    """
    checked_before = bool(OmegaConf.select(config, CHECKED_KEY, default=False))
    with _said_before() if checked_before else nullcontext():
        cfg = _refusals(config)
    with open_dict(config):
        config[CHECKED_KEY] = True
    return cfg


@contextmanager
def _said_before() -> Iterator[None]:
    """Silence the notes of `check_config`: UserWarnings (`CobaConfig`'s ignored knobs) and the
    INFO lines of `coba_verl.core.group_weight`; its refusals still raise."""
    notes = logging.getLogger(check_aggregation.__module__)
    level = notes.level
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        notes.setLevel(logging.WARNING)
        try:
            yield
        finally:
            notes.setLevel(level)


def _refusals(config: DictConfig) -> CobaConfig:
    """The checks of `check_config`, in order; the `CobaConfig`."""
    cfg = coba_config_from(config)
    if config.trainer.use_v1:
        check_v1_mode(config)
        check_async_start(config)
        check_v1_sessions_differ(config)
    check_budget_unit(config, cfg)
    estimator = str(config.algorithm.adv_estimator)
    if estimator not in SUPPORTED_ADV_ESTIMATORS:
        raise CobaRefusal(
            f"algorithm.adv_estimator={estimator} is not supported: CoBA-RL sets the GRPO group size of "
            "each prompt and relies on advantages grouped by prompt uid. "
            f"Set algorithm.adv_estimator to one of {SUPPORTED_ADV_ESTIMATORS}."
        )
    check_aggregation(cfg.group_weight, str(config.actor_rollout_ref.actor.loss_agg_mode), GROUP_WEIGHT_MODES)
    m, n = user_batch(config)
    total = m * n
    low, up = cfg.min_rollouts, cfg.max_rollouts
    check_budget(
        m, total, low, up,
        total_name=f"the budget data.train_batch_size * actor_rollout_ref.rollout.n ({m} * {n})",
        low_name="coba.min_rollouts", up_name="coba.max_rollouts",
        fix=f"Set actor_rollout_ref.rollout.n between {low} and {up}, or move coba.min_rollouts / "
        "coba.max_rollouts around it.",
    )  # fmt: skip
    return cfg


def user_batch(config: DictConfig) -> tuple[int, int]:
    """(M, n): ``data.train_batch_size`` and ``rollout.n`` as the user set them.

    The classic trainer's translation (`coba_verl.verl_plugin.hooks.classic.translate_config`) moves
    them into ``coba_classic`` before veRL sees the config; this reads them from there when set.
    """
    kept = OmegaConf.select(config, "coba_classic")
    if kept is not None and kept.get("rollout_n") is not None:
        return int(kept.train_batch_size), int(kept.rollout_n)
    return int(config.data.train_batch_size), int(config.actor_rollout_ref.rollout.n)


def coba_mode(mode: str) -> str:
    """The registered CoBA trainer for veRL's V1 ``mode`` (`COBA_MODES`); a CoBA name is itself."""
    return mode if mode in COBA_MODES.values() else COBA_MODES[mode]


def check_v1_mode(config: DictConfig) -> None:
    """Refuse V1 modes whose updates coba-verl cannot size in rollouts (veRL 0.9.1 line numbers).

    ``sync``, ``colocate_async`` and ``separate_async`` are supported: each update trains
    (M / parameter_sync_step) x n rollouts (`CobaReplayBuffer`, `CobaReplayBufferAsync`).

    Raises:
        ValueError: another mode; ``sync.parameter_sync_step > 1``.
    """
    mode = config.trainer.v1.trainer_mode
    if mode not in COBA_MODES and mode not in COBA_MODES.values():
        raise CobaRefusal(
            f"trainer.v1.trainer_mode={mode} is not a veRL V1 mode coba-verl supports: use one of "
            f"{sorted(COBA_MODES)}."
        )
    sync_step = OmegaConf.select(config, "trainer.v1.sync.parameter_sync_step", default=1)
    if int(sync_step) > 1:
        raise CobaRefusal(
            f"trainer.v1.sync.parameter_sync_step={sync_step} is not supported: each local update samples "
            "train_batch_size / parameter_sync_step whole groups (verl/trainer/ppo/v1/trainer_base.py:539, "
            "replay_buffer.py:462), whose rollouts do not add up to (M / k) * rollout.n once budgets "
            "differ, while the update is sized as ppo_mini_batch_size * rollout.n trajectories "
            "(trainer_base.py:1602, 1830). Set trainer.v1.sync.parameter_sync_step=1, or use "
            "actor.ppo_mini_batch_size for several optimizer steps per training batch."
        )


# ------------------------------------------------------------------ the asynchronous trainers' start


class VerlCode(NamedTuple):
    """A piece of veRL's code that a rule of `check_async_start` states before Ray."""

    path: str  # under the installed ``verl`` package
    qualname: str  # ``Class.method``
    sha256: str  # of its source in veRL 0.9.1 (`verl_source_sha256`)


#: The veRL 0.9.1 code whose start-up conditions `check_async_start` checks before Ray, by rule. A
#: rule is checked only while its code is veRL 0.9.1's (the source digest); otherwise it is left to
#: veRL, which then stops inside Ray, and a WARNING names the code that changed.
VERL_START_CODE: dict[str, VerlCode] = {
    "separate_async": VerlCode(
        "trainer/ppo/v1/trainer_separate_async.py", "PPOTrainerSeparateAsync.__init__",
        "de8560c80035afd2e889076276d0436e45485b0e36db5d26c76ea7ee49567e17",
    ),
    "hybrid_rollout": VerlCode(
        "trainer/config/config.py", "HybridRolloutSwitchConfig.__post_init__",
        "1427b397ea91579606abba6bef3ec7f23ba638718d97c9d49137fcea05297e94",
    ),
    "old_policy_snapshot": VerlCode(
        "experimental/separation/engine_workers.py", "DetachActorWorker._get_strategy_handlers",
        "60ef996f6bd8a0a8629d94571d1de0fe07d63893cc7762580e7c244a9f32f4fc",
    ),
    "standalone_pool": VerlCode(
        "workers/rollout/llm_server.py", "LLMServerManager._initialize_llm_servers",
        "4705b15549e8ee234121ee10b0fb1eddff01047ff699b7d34937ba4dc3068335",
    ),
    "local_updates": VerlCode("trainer/ppo/v1/trainer_base.py", "PPOTrainer.step",
        "f96e3dddcd7a58356d006b8ae5bf2f13522746be4596888730c17efeff4692d5",
    ),
}  # fmt: skip

#: ``actor.strategy`` values whose weights veRL's ``DetachActorWorker`` can snapshot to host memory
#: for the old policy of ``separate_async``'s local updates (``engine_workers.py:86-108``).
SNAPSHOT_STRATEGIES = ("fsdp", "fsdp2", "veomni", "megatron")


@functools.cache
def verl_source_sha256(path: str, qualname: str) -> str | None:
    """sha256 of the source text of ``qualname`` in the installed veRL's ``path``; None where it is
    not found. Read with `ast`, without importing veRL: the driver checks before veRL picks its
    platform (`coba_verl.cpu.launcher.prepare_cpu_run` sets it)."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        source = (Path(next(iter(spec.submodule_search_locations))) / path).read_text(encoding="utf-8")
    except OSError:
        return None
    node: ast.AST | None = ast.parse(source)
    definitions = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    for name in qualname.split("."):
        children = ast.iter_child_nodes(node)
        node = next((c for c in children if isinstance(c, definitions) and c.name == name), None)
        if node is None:
            return None
    segment = ast.get_source_segment(source, node)
    return hashlib.sha256(segment.encode()).hexdigest() if segment else None


def verl_code_is_known(rule: str) -> bool:
    """True while the veRL code of ``rule`` (`VERL_START_CODE`) is veRL 0.9.1's; else False, said
    once a process at WARNING."""
    code = VERL_START_CODE[rule]
    if verl_source_sha256(code.path, code.qualname) == code.sha256:
        return True
    _say_code_changed(rule)
    return False


@functools.cache
def _say_code_changed(rule: str) -> None:
    code = VERL_START_CODE[rule]
    logger.warning(
        "veRL's %s (verl/%s) is not veRL 0.9.1's: coba-verl leaves its start-up conditions to veRL, "
        "which checks them inside Ray.",
        code.qualname,
        code.path,
    )


class Unfit(NamedTuple):
    """A setting an asynchronous trainer of veRL stops on at start: why, and overrides that fit."""

    reason: str
    fix: tuple[str, ...]


#: veRL's V1 modes whose generation runs ahead of the update, with partial rollout.
ASYNC_MODES = ("colocate_async", "separate_async")


def verl_mode(mode: str) -> str:
    """veRL's name of a V1 mode (``coba_separate_async`` -> ``separate_async``; its own are themselves)."""
    return {coba: verl for verl, coba in COBA_MODES.items()}.get(mode, mode)


def check_async_start(config: DictConfig) -> None:
    """Refuse, before Ray, what veRL's asynchronous V1 trainers stop on once Ray and TransferQueue run.

    ``colocate_async`` and ``separate_async`` (veRL 0.9.1 line numbers; each rule checked while its
    code is 0.9.1's, `VERL_START_CODE`):

    - the rollout engine: SGLang is refused (`check_async_rollout_engine`);
    - ``trainer.v1.<mode>.parameter_sync_step`` must divide ``data.train_batch_size``
      (``trainer_base.py:535``, in the first step);
    - ``separate_async`` only (`separate_async_unfit`): train_batch_size = parameter_sync_step x
      ppo_mini_batch_size, a standalone rollout pool, a checkpoint engine other than ``naive``, a
      reward model in its own pool, no hybrid switch with disaggregated rollout
      (``trainer_separate_async.py:56-104``), veRL's switch settings
      (``config.py:85-89``), a pool of at least one rollout engine (``llm_server.py:455-460``), an
      actor strategy whose old policy can be kept (``engine_workers.py:86-108``).

    All that is unfit is named in one refusal, with overrides that fit.

    Raises:
        CobaRefusal: naming each setting, its value and the value that fits.
    """
    mode = verl_mode(str(config.trainer.v1.trainer_mode))
    if mode not in ASYNC_MODES:
        return
    check_async_rollout_engine(config, mode)
    unfit = local_updates_unfit(config, mode)
    if mode == "separate_async":
        unfit += separate_async_unfit(config)
    if unfit:
        raise CobaRefusal(
            f"trainer.v1.trainer_mode={mode} cannot start with this config; veRL would stop inside Ray, "
            "after Ray and TransferQueue have started: "
            + "; ".join(u.reason for u in unfit)
            + ". To launch it, set: "
            + " ".join(f for u in unfit for f in u.fix)
            + "."
        )


def check_async_rollout_engine(config: DictConfig, mode: str) -> None:
    """Refuse SGLang as the rollout engine of an asynchronous mode.

    The async modes abort the sessions in flight when they sync weights and resume them afterwards
    (partial rollout). veRL 0.9.1's SGLang server returns an aborted request's tokens with an empty
    log-prob list and then drops the tokens too (``sglang_rollout/async_sglang_server.py:661-676``),
    so a resumed session loses what it had generated; and it has no gate for requests that arrive
    while it is paused (``:890-905`` ignores ``reject_request``). vLLM's server keeps both
    (``vllm_rollout/vllm_async_server.py``). Nothing on CPU runs SGLang, so its resume cannot be
    tested here: refused rather than trusted.

    Raises:
        CobaRefusal: ``actor_rollout_ref.rollout.name=sglang`` with ``colocate_async`` or ``separate_async``.
    """
    if OmegaConf.select(config, "actor_rollout_ref.rollout.name") == "sglang":
        raise CobaRefusal(
            f"actor_rollout_ref.rollout.name=sglang is refused with trainer.v1.trainer_mode={mode}: this "
            "mode aborts the sessions in flight at each weight sync and resumes them, and veRL 0.9.1's "
            "SGLang server drops an aborted request's tokens together with their log-probs "
            "(sglang_rollout/async_sglang_server.py:661-676) and has no gate for requests sent while it is "
            "paused (:890-905), so a resumed session would not continue what it generated. Use "
            "actor_rollout_ref.rollout.name=vllm, or SGLang with trainer.v1.trainer_mode=sync."
        )


def _largest_divisor_up_to(m: int, k: int) -> int:
    """The largest divisor of ``m`` that is at most ``k`` (1 at least)."""
    return max(d for d in range(1, max(1, min(m, k)) + 1) if m % d == 0)


def local_updates_unfit(config: DictConfig, mode: str) -> list[Unfit]:
    """``trainer.v1.<mode>.parameter_sync_step`` (veRL reads it for every mode, ``trainer_base.py:130``)
    must divide ``data.train_batch_size``: each local update samples M / k groups, asserted in the
    first step (``trainer_base.py:535``). ``separate_async``'s own rule implies it."""
    if mode == "separate_async" or not verl_code_is_known("local_updates"):
        return []
    m = int(config.data.train_batch_size)
    k = int(OmegaConf.select(config, f"trainer.v1.{mode}.parameter_sync_step", default=1))
    if k >= 1 and m % k == 0:
        return []
    return [
        Unfit(
            f"trainer.v1.{mode}.parameter_sync_step={k} does not divide data.train_batch_size={m} "
            "(trainer_base.py:535)",
            (f"trainer.v1.{mode}.parameter_sync_step={_largest_divisor_up_to(m, k)}",),
        )
    ]


def separate_async_unfit(config: DictConfig) -> list[Unfit]:
    """What ``PPOTrainerSeparateAsync`` and the code it starts would stop on (`check_async_start`).

    On the CPU backend (``coba_cpu.enable``) the checkpoint engine and the pool's engine size are
    the launcher's (`coba_verl.cpu.launcher.standalone_rollout_slots`: ``naive`` becomes its
    ``ray_object_store``, one ``hf`` server a slot).
    """
    on_cpu = bool(OmegaConf.select(config, "coba_cpu.enable", default=False))
    unfit: list[Unfit] = []
    rollout = config.actor_rollout_ref.rollout
    if verl_code_is_known("separate_async"):
        unfit += _sync_step_unfit(config)
        unfit += _pool_unfit(config, engine_size=1 if on_cpu else _engine_size(config))
        backend = OmegaConf.select(rollout, "checkpoint_engine.backend")
        if backend == "naive" and not on_cpu:
            unfit.append(
                Unfit(
                    "actor_rollout_ref.rollout.checkpoint_engine.backend=naive cannot send weights to a "
                    "standalone rollout pool (trainer_separate_async.py:68-70; nixl and mooncake also fit)",
                    ("actor_rollout_ref.rollout.checkpoint_engine.backend=nccl",),
                )
            )
        reward_model = config.reward.reward_model
        if bool(reward_model.enable) and not bool(reward_model.enable_resource_pool):
            pool = [
                f"reward.reward_model.{key}=1"
                for key in ("nnodes", "n_gpus_per_node")
                if reward_model[key] <= 0
            ]
            unfit.append(
                Unfit(
                    "reward.reward_model.enable=true needs the reward model in its own pool "
                    "(reward.reward_model.nnodes x n_gpus_per_node, both above 0: trainer_base.py:824-827), "
                    "since the standalone rollout never pauses to free memory "
                    "(trainer_separate_async.py:71-76)",
                    ("reward.reward_model.enable_resource_pool=true", *pool),
                )
            )
        switch = f"{SWITCH}.enable_switch"
        if bool(OmegaConf.select(config, switch, default=False)) and bool(
            OmegaConf.select(rollout, "disaggregation.enabled", default=False)
        ):
            unfit.append(
                Unfit(
                    f"{switch}=true does not work with actor_rollout_ref.rollout.disaggregation.enabled=true "
                    "(trainer_separate_async.py:97-104)",
                    (f"{switch}=false",),
                )
            )
    if verl_code_is_known("hybrid_rollout"):
        unfit += _switch_unfit(config)
    bypass = bool(OmegaConf.select(config, "algorithm.rollout_correction.bypass_mode", default=False))
    strategy = OmegaConf.select(config, "actor_rollout_ref.actor.strategy")
    if not bypass and strategy not in SNAPSHOT_STRATEGIES and verl_code_is_known("old_policy_snapshot"):
        unfit.append(
            Unfit(
                f"actor_rollout_ref.actor.strategy={strategy} cannot keep the old policy of the local "
                "updates in host memory: veRL's DetachActorWorker does it for "
                f"{', '.join(SNAPSHOT_STRATEGIES)} only, and fails at the second local update "
                "(engine_workers.py:86-108)",
                ("actor_rollout_ref.actor.strategy=fsdp2",),
            )
        )
    return unfit


#: veRL's settings of ``separate_async``'s hybrid switch (``HybridRolloutSwitchConfig``).
SWITCH = "trainer.v1.separate_async.hybrid_rollout"


def _sync_step_unfit(config: DictConfig) -> list[Unfit]:
    """M = k x ppo_mini_batch_size (``trainer_separate_async.py:56-63``): each of the k local updates
    between two weight syncs trains one mini-batch of M / k prompts."""
    m = int(config.data.train_batch_size)
    mini = int(config.actor_rollout_ref.actor.ppo_mini_batch_size)
    k = int(config.trainer.v1.separate_async.parameter_sync_step)
    if m == k * mini:
        return []
    step_key = "trainer.v1.separate_async.parameter_sync_step"
    mini_key = "actor_rollout_ref.actor.ppo_mini_batch_size"
    fits = [f"{step_key}={m // mini}"] if mini > 0 and m % mini == 0 else []
    fits += [f"{mini_key}={m // k}"] if k > 0 and m % k == 0 else []
    reason = (
        f"data.train_batch_size={m} must equal {step_key}={k} x {mini_key}={mini} "
        "(trainer_separate_async.py:56-63: each local update between two weight syncs trains one mini-batch)"
    )
    if len(fits) == 2:
        reason += f"; {fits[1]} fits as well"
    return [Unfit(reason, (fits[0],) if fits else (f"{step_key}=1", f"{mini_key}={m}"))]


def _engine_size(config: DictConfig) -> int:
    """GPUs of one rollout engine: tensor x data x pipeline parallel sizes (``llm_server.py:436-440``);
    1 with disaggregated prefill and decode, whose size veRL computes otherwise."""
    rollout = config.actor_rollout_ref.rollout
    if bool(OmegaConf.select(rollout, "disaggregation.enabled", default=False)):
        return 1
    sizes = ("tensor_model_parallel_size", "data_parallel_size", "pipeline_model_parallel_size")
    size = 1
    for key in sizes:
        size *= int(OmegaConf.select(rollout, key, default=1) or 1)
    return size


def _pool_unfit(config: DictConfig, engine_size: int) -> list[Unfit]:
    """A standalone rollout pool, ``rollout.nnodes x rollout.n_gpus_per_node`` devices besides the
    trainer's (``trainer_separate_async.py:64-67``), of at least one rollout engine: veRL starts
    pool // engine_size engines (``llm_server.py:455-460``), none in a smaller pool."""
    rollout = config.actor_rollout_ref.rollout
    nodes, per_node = int(rollout.nnodes), int(rollout.n_gpus_per_node)
    need = engine_size if verl_code_is_known("standalone_pool") else 1
    if nodes > 0 and per_node > 0 and nodes * per_node >= need:
        return []
    fix_nodes = max(nodes, 1)
    fix_per_node = max(per_node, -(-need // fix_nodes))
    fix = tuple(
        f"actor_rollout_ref.rollout.{key}={new}"
        for key, old, new in (("nnodes", nodes, fix_nodes), ("n_gpus_per_node", per_node, fix_per_node))
        if new != old
    )
    reason = (
        f"actor_rollout_ref.rollout.nnodes={nodes} x n_gpus_per_node={per_node}: separate_async generates on "
        "a standalone rollout pool of that many devices besides the trainer's trainer.nnodes x "
        "trainer.n_gpus_per_node (trainer_separate_async.py:64-67)"
    )
    if need > 1:
        reason += (
            f", of at least one rollout engine of {need} (tensor x data x pipeline parallel size; "
            "llm_server.py:455-460)"
        )
    return [Unfit(reason, fix)]


def _switch_unfit(config: DictConfig) -> list[Unfit]:
    """veRL's ``HybridRolloutSwitchConfig`` refuses a threshold ratio outside (0, 1] and a cost
    window below 1 (``config.py:85-89``), built in ``PPOTrainerSeparateAsync.__init__`` (``:86-88``)."""
    unfit = []
    ratio = float(OmegaConf.select(config, f"{SWITCH}.switch_threshold_ratio", default=0.4))
    if not 0.0 < ratio <= 1.0:
        unfit.append(
            Unfit(
                f"{SWITCH}.switch_threshold_ratio={ratio} is outside (0, 1] (config.py:86-87)",
                (f"{SWITCH}.switch_threshold_ratio=0.4",),
            )
        )
    window = int(OmegaConf.select(config, f"{SWITCH}.switch_cost_window_size", default=3))
    if window <= 0:
        unfit.append(
            Unfit(
                f"{SWITCH}.switch_cost_window_size={window} must be positive (config.py:88-89)",
                (f"{SWITCH}.switch_cost_window_size=3",),
            )
        )
    return unfit


def check_v1_sessions_differ(config: DictConfig) -> None:
    """Refuse ``rollout.full_determinism=true`` in V1, where it makes every group zero-variance.

    veRL 0.9.1's single-turn agent loop gives a session the request id ``det-{priority}`` under full
    determinism (``experimental/agent_loop/single_turn_agent_loop.py:69``), the same for all B_i
    sessions of a prompt, and the router sends one request id to one replica with one seed
    (``router.py:193-197``): the B_i answers come back identical, every group has zero reward
    variance and GRPO trains nothing, silently.

    Raises:
        ValueError: naming the setting and what to set instead.
    """
    if bool(OmegaConf.select(config, "actor_rollout_ref.rollout.full_determinism", default=False)):
        raise CobaRefusal(
            "actor_rollout_ref.rollout.full_determinism=true is refused with per-prompt budgets in the V1 "
            "trainer: veRL 0.9.1 gives every session of a prompt the same request id (det-<priority>, "
            "single_turn_agent_loop.py:69), so its B_i sessions reach one replica with one seed and come "
            "back identical, and every group has zero variance. Set "
            "actor_rollout_ref.rollout.full_determinism=false (seeded sampling still makes runs repeatable "
            "per request)."
        )


def check_budget_unit(config: DictConfig, cfg: CobaConfig) -> None:
    """Refuse ``coba.budget_unit=tokens`` where a step's rollouts must add up to M x rollout.n.

    Under a token budget sum_i B_i varies. The V1 sync trainer without DAPO trains whatever was
    generated (``_balance_batch`` pads any count to its mini-batch multiple), so it is supported
    there. DAPO and failed-group refill train exactly M x rollout.n rollouts (`core.trained_budget`),
    a count a token budget does not keep; the classic trainer's batch is sized as M x rollout.n
    rows before generation (`coba_verl.verl_plugin.hooks.classic`).

    Raises:
        ValueError: ``tokens`` with the classic trainer, DAPO, ``sync_refill_failed_groups`` or an
            asynchronous mode (whose updates train M x rollout.n rollouts each).
    """
    if cfg.budget_unit != "tokens":
        return
    dapo = bool(OmegaConf.select(config, "algorithm.filter_groups.enable", default=False))
    refill = bool(OmegaConf.select(config, "trainer.v1.sampler.sync_refill_failed_groups", default=False))
    where = None
    if not config.trainer.use_v1:
        where = "the classic trainer (trainer.use_v1=false): its batch is sized as M x rollout.n rows"
    elif dapo:
        where = (
            "DAPO dynamic sampling (algorithm.filter_groups.enable=true): it trains M x rollout.n rollouts"
        )
    elif refill:
        where = "trainer.v1.sampler.sync_refill_failed_groups=true: it trains M x rollout.n rollouts"
    elif coba_mode(config.trainer.v1.trainer_mode) != COBA_MODES["sync"]:  # check_v1_mode ran before
        mode = config.trainer.v1.trainer_mode
        where = f"trainer.v1.trainer_mode={mode}: each update trains M x rollout.n rollouts"
    if where is not None:
        raise CobaRefusal(
            f"coba.budget_unit=tokens is not supported with {where} a step, while under a token budget "
            "the rollouts of a step vary. Use the V1 sync trainer without DAPO, or coba.budget_unit=rollouts."
        )
