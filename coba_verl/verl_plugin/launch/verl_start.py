"""The one refusal of veRL's start-up conditions before Ray, and those of veRL's asynchronous modes.

`check_verl_start` refuses, in one line before Ray (and TransferQueue) start, what veRL 0.9.1's
trainers would stop on inside Ray: the conditions every trainer meets
(`coba_verl.verl_plugin.launch.trainer_start`), those of the ``colocate_async`` and
``separate_async`` trainers (here: no SGLang, local updates that divide the batch), and
``separate_async``'s own (`coba_verl.verl_plugin.launch.separate_async_start`). Each rule is checked
only while the veRL code that states it is 0.9.1's (its source digest in `VERL_START_CODE`); a
changed one is left to veRL, with a WARNING naming the code.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from coba_verl.refusal import CobaRefusal
from coba_verl.verl_plugin.launch.separate_async_start import separate_async_unfit
from coba_verl.verl_plugin.launch.trainer_start import Unfit, trainer_start_unfit
from coba_verl.verl_plugin.launch.verl_code import verl_code_is_known
from coba_verl.verl_plugin.verl_names import ASYNC_MODES, verl_mode


def check_verl_start(config: DictConfig) -> None:
    """Refuse, before Ray, what veRL's trainer for ``config`` stops on once Ray (and TransferQueue) run.

    Every trainer (`trainer_start_unfit`, veRL 0.9.1 line numbers): a reward model in its own pool of
    ``reward.reward_model.nnodes x n_gpus_per_node`` devices, both above 0 (``trainer_base.py:823-827``,
    ``main_ppo_v0.py:75-79``); a checkpoint engine veRL registers and whose module imports here
    (``checkpoint_engine/base.py:93-98``, ``checkpoint_engine/__init__.py``); disaggregated prefill and
    decode with SGLang or vLLM only (``rollout.py:341-344``); training devices that divide into rollout
    engines (``engine_workers.py:655-661``) and, in V1, hold one (``llm_server.py:434-460``); V1: DAPO's
    ``algorithm.filter_groups.metric`` set and no colocated reward model with it
    (``trainer_base.py:194-204``), ``trainer.v1.sampler.max_off_policy_threshold`` a positive integer
    or null and ``max_off_policy_strategy`` drop or wait (``replay_buffer.py:165-177``).

    ``colocate_async`` and ``separate_async``:

    - the rollout engine: SGLang is refused (`check_async_rollout_engine`);
    - ``trainer.v1.<mode>.parameter_sync_step`` must divide ``data.train_batch_size``
      (``trainer_base.py:535``, in the first step);
    - ``separate_async`` only (`separate_async_unfit`): train_batch_size = parameter_sync_step x
      ppo_mini_batch_size, a standalone rollout pool, a checkpoint engine other than ``naive``, a
      reward model in its own pool, no hybrid switch with disaggregated rollout where hybrid
      replicas are on (``trainer_separate_async.py:56-104``), veRL's switch settings
      (``config.py:85-89``), a pool of at least one rollout engine (``llm_server.py:434-460``), an
      actor strategy whose old policy can be kept (``engine_workers.py:86-108``).

    All that is unfit is named in one refusal, with overrides that fit (where only an install fits,
    the reason names it).

    Raises:
        CobaRefusal: naming each setting, its value and the value that fits.
    """
    unfit: list[Unfit] = []
    if config.trainer.use_v1:
        mode = verl_mode(str(config.trainer.v1.trainer_mode))
        where = f"trainer.v1.trainer_mode={mode}"
        started = "Ray and TransferQueue have"
        if mode in ASYNC_MODES:
            check_async_rollout_engine(config, mode)
            unfit += local_updates_unfit(config, mode)
            if mode == "separate_async":
                unfit += separate_async_unfit(config)
    else:
        where, started = "the classic trainer (trainer.use_v1=false)", "Ray has"
    unfit += trainer_start_unfit(config)
    if unfit:
        fixes = dict.fromkeys(f for u in unfit for f in u.fix)  # in order, each once
        raise CobaRefusal(
            f"{where} cannot start with this config; veRL would stop inside Ray, after {started} started: "
            + "; ".join(u.reason for u in unfit)
            + (". To launch it, set: " + " ".join(fixes) if fixes else "")
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
