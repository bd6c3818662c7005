"""`CobaGRPOTrainer`: TRL's `GRPOTrainer` with a CoBA-RL group size B_i per prompt (spec §1, §7).

Tested with TRL 1.16.0. Five methods of TRL's trainer are extended; each calls TRL's own:

``_generate_and_score_completions``  (train mode) gather the round's rows, collapse TRL's G copies
                                     of each prompt into one, B = allocate(ids, M * G) on the main
                                     process, broadcast to the others, expand prompt i to B_i rows
                                     and keep this process's slice; TRL generates and scores it;
                                     then the advantages over the variable groups replace TRL's
                                     (times (R / G) / B_g under ``coba.group_weight=equal``),
                                     the tracker gets one score per completion, and the ``coba/``
                                     metrics go to TRL's log. Evaluation is TRL's, untouched.
``_generate_single_turn``            TRL's; in vLLM server mode while training, one completion per
                                     row, asked of the server one group size at a time
                                     (`GroupSizeClient`). Transformers and colocated vLLM generate
                                     per row already.
``_calculate_rewards``               TRL's, keeping the gathered rewards (T, F) for the above.
``_save_checkpoint``                 TRL's, then ``coba_allocator.npz`` in ``checkpoint-<step>/``.
``_load_optimizer_and_scheduler``    TRL's, then the allocator, TRL's ``_step`` and the unfinished
                                     round from that file on resume.

One generation round, G = num_generations = 4, two processes holding L = 6 rows each
(M = 3 prompts, T = M * G = 12 rows; numbers are the prompt-id column)::

    TRL's RepeatSampler rows        rank 0: [7 7 7 7 2 2]      rank 1: [2 2 5 5 5 5]
    gather_object, collapse runs    [7 7 7 7 | 2 2 2 2 | 5 5 5 5]  ->  prompts [7, 2, 5]
    allocate on rank 0, broadcast   B = [2, 7, 3]                      sum = 12 = M * G
    expand                          [7 7 | 2 2 2 2 2 2 2 | 5 5 5]
    keep rows [r * L, (r + 1) * L)  rank 0: [7 7 2 2 2 2]      rank 1: [2 2 2 5 5 5]
    TRL generates, scores, gathers  rewards (12, F) in the expanded order
    group advantages                groups [0 0 1 1 1 1 1 1 1 2 2 2] -> (12,); rank r keeps its L
    observe, end_step               tracker ids of the 12 rows, one score each

Every process still holds L = per_device_train_batch_size * steps_per_generation rows, exactly
as many as under stock TRL, so TRL's buffering (shuffle, split into steps_per_generation
batches, reuse for num_iterations), its loss normalisation and gradient accumulation are
unchanged. Only the prompt of each row differs: a group may straddle processes (prompt 2 above)
and appear in several buffered batches, which is harmless because advantages come from the
gathered rewards, as in stock TRL when per_device_train_batch_size < G.

Allocation happens inside the round, not in a sampler, so it always uses the tracker as of the
last round: accelerate's one-batch look-ahead and loader workers' prefetch only ever see TRL's
plain repeated rows. One CoBA step (allocate, observe, ``end_step``) is one generation round,
i.e. one optimiser step with TRL's defaults (steps_per_generation = gradient_accumulation_steps,
num_iterations = 1).

Only the main process allocates: every tracker observes the same gathered scores, but exact ties
between gains fall by the last bit of ``exp`` (`coba_verl.core.solvers`), which may differ between
the libm / numpy builds of mixed nodes, so recomputing on each process could split a round
differently. An allocation error on the main process is raised on every process.

Resume with a checkpoint inside a round (``num_iterations > 1``, or steps_per_generation above
gradient_accumulation_steps): the tracker has already observed that round, and TRL, which saves
neither its buffered completions nor its micro-step counter ``_step``, generates the round again
and restarts its cycle at ``_step = 0``. The side file therefore keeps ``_step`` (restored, so
TRL's rounds stay in phase with the data) and the round's prompts and budgets; the regenerated
round reuses those budgets, matched by prompt id, and is not observed again. Counting it twice,
or replacing its scores with the regenerated ones, would make every later allocation depend on
where the run was interrupted; this way they equal the uninterrupted run's as far as TRL resumes
the same prompts. (Past the first epoch it may not: TRL's RepeatSampler restarts its shuffle on
resume. A first round of other prompts is allocated anew, with a warning.)
"""

from __future__ import annotations

import inspect
import logging
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from accelerate.utils import broadcast_object_list, gather_object
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOTrainer

from coba_verl.core import Allocation, BudgetAllocator, CobaConfig
from coba_verl.core.group_weight import check_group_weight, rollout_weights
from coba_verl.core.metrics import PREFIX, step_metrics
from coba_verl.records.rounds import Round, group_index
from coba_verl.refusal import CobaTypeRefusal
from coba_verl.trl.checkpoint import load_allocator, run_identity, save_allocator
from coba_verl.trl.checks import (
    DEFAULT_ID_COLUMN,
    check_args,
    check_generation,
    check_trl_api,
    prompt_id_map,
    seed_priors,
)
from coba_verl.trl.groups import (
    collapse_runs,
    expand_rows,
    group_advantages,
    prompt_mean_score,
    row_scores,
)
from coba_verl.trl.server_client import GroupSizeClient

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_ID_COLUMN", "CobaGRPOTrainer", "weight_group_advantages"]

check_trl_api(GRPOTrainer)


def weight_group_advantages(advantages: torch.Tensor, budgets: np.ndarray, group_weight: str) -> torch.Tensor:
    """The round's advantages (T,), rows in group order, times `rollout_weights` of their groups.

    R = T rows of the round, G = M prompts, B_g = budgets[g]: ``equal`` multiplies row j by
    (T / M) / B_{g(j)}; ``proportional`` returns ``advantages`` itself.

        budgets [2, 3, 1] -> groups [0 0 1 1 1 2] -> factors [1 1 2/3 2/3 2/3 2]
    """
    if check_group_weight(group_weight) == "proportional":
        return advantages
    groups = group_index(budgets)  # (T,)
    factors = torch.as_tensor(rollout_weights(groups, group_weight), dtype=advantages.dtype)
    return advantages * factors.to(advantages.device)


@dataclass(frozen=True)
class _Round(Round):
    """One generation round as planned before TRL generates it: the `Round` (ids (M,), allocation,
    ``rollout_ids`` (T,) of the expanded rows) and how this process takes part in it."""

    replayed: bool  # the checkpoint's unfinished round, observed before the interruption
    local_rows: list[dict[str, Any]]  # (L,) this process's slice of the expanded rows
    local_slice: slice  # its position in the round's T rows
    plan_s: float  # wall time spent planning


class CobaGRPOTrainer(GRPOTrainer):
    """TRL's `GRPOTrainer` whose training groups have a CoBA-RL budget B_i per prompt.

    Construct it as a `GRPOTrainer` plus two keywords; ``num_generations`` becomes the mean
    group size (the round spends M * num_generations completions, spec §1).

    Args:
        *args, **kwargs: as for `trl.GRPOTrainer`.
        coba_config: The allocation knobs (`coba_verl.core.CobaConfig`, the dataclass the veRL
            plugin uses); ``None`` uses its defaults (``strategy="coba"``, B in [2, 128]).
        prompt_id_column: Column of ``train_dataset`` with a unique, stable id per prompt
            (integers or strings), e.g. from ``dataset.map(lambda row, i: {"prompt_id": i},
            with_indices=True)``. Pass rates are keyed by it, across epochs and resumes.

    Attributes:
        allocator: The run's `BudgetAllocator`. Only the main process's allocates; every process's
            tracker observes the same gathered scores.
        last_allocation: The `Allocation` of the latest training round, or ``None``.

    Metrics (TRL's log, train mode): the ``coba/`` scalars of `coba_verl.core.metrics`, plus
    ``coba/plugin_time_s`` (this trainer's wall time in the round) and ``coba/prompt_mean_score``,
    the mean over the round's prompts of each prompt's mean score. TRL's ``reward`` averages
    over completions, so under per-prompt budgets it weighs prompt i by B_i and leans toward the
    prompts given more rollouts; compare strategies by ``coba/prompt_mean_score`` (equal to
    ``reward`` when every B_i = G) or by the held-out ``eval_reward``.

    Raises:
        TypeError: ``coba_config`` that is not a `CobaConfig`; ``args`` that is not a ``GRPOConfig``
            (TRL's experimental ``AsyncGRPOConfig``).
        ValueError: before TRL loads the model when the arguments allow, for a ``rollout_func``;
            ``num_generations`` outside [min_rollouts, max_rollouts]
            (`CobaConfig` itself refuses ``min_rollouts < 2``); ``remove_unused_columns=True``; no
            map-style ``train_dataset``; a missing id column, ids that are not int or str or mix
            the two, or a repeated id.
    """

    def __init__(
        self,
        *args: Any,
        coba_config: CobaConfig | None = None,
        prompt_id_column: str = DEFAULT_ID_COLUMN,
        **kwargs: Any,
    ) -> None:
        given = inspect.signature(GRPOTrainer.__init__).bind(None, *args, **kwargs).arguments
        coba = CobaConfig() if coba_config is None else coba_config
        if not isinstance(coba, CobaConfig):
            raise CobaTypeRefusal(
                f"coba_config must be a coba_verl.core.CobaConfig, got {type(coba).__name__}; for a mapping "
                "use CobaConfig.from_mapping(...)."
            )
        check_generation(given.get("rollout_func"))
        if given.get("args") is not None:
            check_args(given["args"], coba)
        id_map = prompt_id_map(given.get("train_dataset"), prompt_id_column)
        super().__init__(*args, **kwargs)
        check_args(self.args, coba)  # the arguments TRL defaulted or completed
        self.coba_config = coba
        self.prompt_id_column = prompt_id_column
        self.coba_prompt_ids = id_map
        self.coba_identity = run_identity(
            given["train_dataset"], id_map, prompt_id_column, given.get("model")
        )  # what a resume checks its checkpoint against
        self.allocator = BudgetAllocator(coba, num_prompts=id_map.num_prompts)
        seed_priors(self.allocator, id_map, coba, given["train_dataset"], prompt_id_column)
        self.last_allocation: Allocation | None = None
        self._last_ids: np.ndarray | None = None  # (M,) tracker ids of the latest round
        self._unfinished: Round | None = None  # the checkpoint's unfinished round, until replayed
        self._round_rewards: torch.Tensor | None = None
        logger.info(
            "CoBA-RL for TRL: %d prompts keyed by %r, strategy=%s, B in [%d, %d], mean %d per prompt",
            id_map.num_prompts,
            prompt_id_column,
            coba.strategy,
            coba.min_rollouts,
            coba.max_rollouts,
            self.num_generations,
        )

    # ------------------------------------------------------------------ TRL extension points
    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """Train mode: TRL's generation and scoring of this process's rows of the budgeted round,
        with advantages over the variable groups. Eval mode: TRL's, unchanged."""
        if not self.model.training:
            return super()._generate_and_score_completions(inputs)
        plan = self._plan_round(inputs)
        self._round_rewards = None
        output = super()._generate_and_score_completions(plan.local_rows)
        start = time.perf_counter()
        rewards_per_func = self._round_rewards
        assert rewards_per_func is not None, "TRL scored the round without _calculate_rewards"
        assert rewards_per_func.shape[0] == plan.rollout_ids.size, "gathered rewards do not match the round"
        advantages, is_std_zero = group_advantages(
            rewards_per_func,
            self.reward_weights,
            plan.allocation.budgets,
            scale_rewards=self.scale_rewards,
            multi_objective_aggregation=self.multi_objective_aggregation,
        )  # (T,), (T,)
        budgets, group_weight = plan.allocation.budgets, self.coba_config.group_weight
        advantages = weight_group_advantages(advantages, budgets, group_weight)  # what the loss sees
        output["advantages"] = advantages[plan.local_slice]
        self._replace_trl_group_logs(advantages, is_std_zero)
        scores = row_scores(rewards_per_func, self.reward_weights)  # (T,), NaN = unscored
        round_metrics = {PREFIX + "prompt_mean_score": prompt_mean_score(scores, plan.allocation.budgets)}
        if not plan.replayed:  # a replayed round is in the restored tracker already
            self._observe(plan.rollout_ids, scores)
            round_metrics.update(self.allocator.end_step())
        metrics = step_metrics(plan.allocation, round_metrics)
        metrics[PREFIX + "plugin_time_s"] = plan.plan_s + time.perf_counter() - start
        for name, value in metrics.items():
            self._metrics["train"][name].append(value)
        self.last_allocation, self._last_ids = plan.allocation, plan.ids
        self._round_rewards = None
        return output

    def _generate_single_turn(
        self,
        prompt_ids: Any,
        images: Any,
        multimodal_fields: Any,
        num_generations: int,
        has_tool_images: bool = False,
    ) -> Any:
        """TRL's generation; in vLLM server mode while training, one completion per row of the round,
        asked of the server one group size at a time (`GroupSizeClient`: TRL's stride of
        ``num_generations`` rows would skip prompts whose budget is not G)."""
        if self.use_vllm and self.args.vllm_mode == "server" and self.model.training:
            generation = self.vllm_generation
            if self.accelerator.is_main_process and not isinstance(generation.vllm_client, GroupSizeClient):
                generation.vllm_client = GroupSizeClient(generation.vllm_client)
            num_generations = 1
        return super()._generate_single_turn(
            prompt_ids, images, multimodal_fields, num_generations, has_tool_images
        )

    def _calculate_rewards(
        self, inputs: list[dict[str, Any]], prompts: list, completions: list, completion_ids_list: list
    ) -> torch.Tensor:
        """TRL's rewards (T, F), gathered over processes; kept for the variable-group advantages."""
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._round_rewards = rewards_per_func
        return rewards_per_func

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        """TRL's checkpoint, then the allocator, TRL's ``_step`` and an unfinished round beside it
        (main process)."""
        super()._save_checkpoint(model, trial)
        if self.args.should_save:
            folder = os.path.join(
                self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            )
            generate_every = self.args.steps_per_generation * self.num_iterations  # TRL's micro-steps a round
            unfinished = None
            if self._step % generate_every and self.last_allocation is not None:
                unfinished = Round(ids=self._last_ids, allocation=self.last_allocation)
            save_allocator(
                folder,
                self.allocator,
                identity=self.coba_identity,
                trl_step=self._step,
                unfinished=unfinished,
            )

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        """TRL's resume, then the allocator, TRL's ``_step`` and the unfinished round (every process).

        With ``ignore_data_skip=True`` the data restart at the epoch's first round, and so do
        TRL's rounds: ``_step`` stays 0 and no round is replayed.
        """
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        resumed = load_allocator(
            checkpoint, self.allocator, identity=self.coba_identity, id_column=self.prompt_id_column
        )
        if resumed is None:
            logger.warning("%s has no CoBA-RL allocator state: pass rates start empty.", checkpoint)
            return
        logger.info("CoBA-RL allocator restored from %s (%d steps)", checkpoint, self.allocator.tracker.steps)
        if self.args.ignore_data_skip:
            return
        self._step = resumed.trl_step  # TRL does not save it; its rounds stay in phase with the data
        self._unfinished = resumed.unfinished

    # ------------------------------------------------------------------ helpers
    def _plan_round(self, inputs: list[dict[str, Any]]) -> _Round:
        """Gather the round's rows, allocate over its prompts, expand, and cut this process's rows."""
        start = time.perf_counter()
        local_n = len(inputs)
        world, rank = self.accelerator.num_processes, self.accelerator.process_index
        rows = gather_object(list(inputs))  # (T,) process order = TRL's sampler order
        if len(rows) != local_n * world:
            raise RuntimeError(
                f"processes hold different row counts: {len(rows)} rows over {world} processes."
            )
        column = self.prompt_id_column
        heads = collapse_runs(
            [row[column] for row in rows], self.num_generations
        )  # (M,) first row per prompt
        prompt_rows = [rows[i] for i in heads.tolist()]
        ids = self.coba_prompt_ids.ids(row[column] for row in prompt_rows)  # (M,) tracker ids
        allocation, replayed = self._round_allocation(ids, len(rows))
        local_slice = slice(rank * local_n, (rank + 1) * local_n)
        local_rows = expand_rows(prompt_rows, allocation.budgets)[local_slice]  # (L,)
        return _Round(
            ids=ids,
            allocation=allocation,
            replayed=replayed,
            local_rows=local_rows,
            local_slice=local_slice,
            plan_s=time.perf_counter() - start,
        )

    def _round_allocation(self, ids: np.ndarray, total: int) -> tuple[Allocation, bool]:
        """The round's allocation, and whether it is the checkpoint's unfinished round regenerated."""
        unfinished, self._unfinished = self._unfinished, None
        if unfinished is not None:
            replayed = unfinished.for_ids(ids)
            if replayed is not None:
                logger.info("CoBA-RL: the checkpoint's unfinished round is regenerated with its budgets")
                return replayed, True
            logger.warning(
                "CoBA-RL: the first round after resuming holds other prompts than the checkpoint's "
                "unfinished round (TRL's sampler restarts its shuffle on a resume past the first epoch; "
                "or the data or batch sizes changed); allocating it anew."
            )
        return self._allocate_on_main(ids, total), False

    def _allocate_on_main(self, ids: np.ndarray, total: int) -> Allocation:
        """The main process's allocation, on every process (module docstring: why not recompute).

        An error on the main process is sent as text too, so the others raise instead of waiting.
        """
        answer: Allocation | str | None = None
        error: Exception | None = None
        if self.accelerator.is_main_process:
            try:
                answer = self.allocator.allocate(ids, total)
            except Exception as err:  # re-raised below, after the others have been told
                error, answer = err, f"{type(err).__name__}: {err}"
        answer = broadcast_object_list([answer], from_process=0)[0]
        if error is not None:
            raise error
        if not isinstance(answer, Allocation):
            raise RuntimeError(f"CoBA-RL allocation failed on the main process: {answer}")
        return answer

    def _replace_trl_group_logs(self, advantages: torch.Tensor, is_std_zero: torch.Tensor) -> None:
        """TRL logged advantages and ``frac_reward_zero_std`` of fixed groups of G; log the real groups'."""
        self._metrics["train"]["frac_reward_zero_std"][-1] = is_std_zero.float().mean().item()
        logged = self._logs["advantages"]
        for _ in range(min(advantages.numel(), len(logged))):
            logged.pop()
        logged.extend(advantages.tolist())

    def _observe(self, row_ids: np.ndarray, scores: torch.Tensor) -> None:
        """Feed the tracker one score per completion (`row_scores`); unscored (NaN) rows are skipped."""
        scored = ~torch.isnan(scores)  # (T,)
        self.allocator.observe(row_ids[scored.cpu().numpy()], scores[scored].double().cpu().numpy())
