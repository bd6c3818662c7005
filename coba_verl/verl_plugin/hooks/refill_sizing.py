"""C-size in veRL's V1 sync trainer under DAPO (``coba.size_refills``): each submission sized to the
rollouts the step still misses.

The lab's DAPO study (docs/dapo_n16_design.md, amendment 1, item 6; `coba_verl.lab.dapo`'s
``size_waves``) measured it: a generation wave's budgets are trimmed, in submission order, to the
rollouts still missing; the last prompt keeps max(B_low, what is left), and the prompts beyond go back
to the stream with their allocated budgets. Here a submission is the step's first batch or one of
the counted DAPO sampling's refills (`CobaReplayBuffer._sample_rollouts`), and what is missing is
counted in sessions:

    slots = M x n - ready sessions - budgets of the groups in flight (pending or running)

`coba_verl.core.wave_sizing.size_submission` is the rule (the lab's and `coba-verl plan`'s too);
`RefillSizer` applies it where the trainer hands prompts out
(`CobaTrainer._next_train_batch`): the prompts not submitted go back to the front of the round's
rest (``CobaDataLoader.round_rest``, in data.pt), each with the budget its round gave it, and are the
first of the next refill or the next step. A trimmed budget's rollouts are never generated: no group,
session or outcome exists for them (the ledger opens the group with the trimmed budget), and
``coba/trimmed_rollouts`` counts them per step.

With no slot left while groups are in flight, the buffer submits nothing and waits (an eviction opens
slots again). The step's first submission has the whole M x n: the sync buffer trains, evicts or
discards every group within its step, so a step starts with nothing ready or in flight.

    budgets [4, 4, 4], slots 9, B_low 2  ->  submitted [4, 4, 2] (2 trimmed), none put back
    budgets [4, 4, 4], slots 8, B_low 2  ->  submitted [4, 4], the third prompt put back with its 4
    budgets [4, 4, 4], slots 1, B_low 2  ->  submitted [2] (2 trimmed), two put back

C-size lives in coba-verl's own buffer: a custom sampler (``trainer.v1.sampler.custom_sampler``),
which veRL builds in its place, cannot be sized. The launch checks refuse ``coba.size_refills=true``
with one, in one line before Ray (`coba_verl.verl_plugin.launch.config_bridge.check_size_refills`),
and resolve ``auto`` to off there, with a WARNING naming the sampler (`resolve_size_refills`).

Two things bound every counted sample's refills, sized or not, in the sync and the async buffers:
`EmptyGroupWatch` stops them once 2 x M prompt groups in a row came back with no finished session
(every session failing), and `submitted_count` counts the prompts a refill actually submitted (under
C-size fewer than asked for), which the watch's error names.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict
from verl.utils import tensordict_utils as tu

from coba_verl.core.wave_sizing import size_submission
from coba_verl.verl_plugin.hooks.sessions import uid_of

logger = logging.getLogger(__name__)


class RefillSizer:
    """Shared by `CobaTrainer` and its `CobaReplayBuffer` (``coba.size_refills``): the buffer opens
    the slots of a refill (`submitting`), the trainer sizes what it hands out to them (`size`).

    Args:
        min_rollouts: B_low (``coba.min_rollouts``), the fewest sessions the last prompt keeps.
        budget_of: the budget B_i of a submitted group by uid (the trainer's ledger), None when it
            does not know it.
        rollouts_per_prompt: rollout.n, a group's budget where ``budget_of`` does not know it.
    """

    def __init__(
        self, min_rollouts: int, budget_of: Callable[[str], int | None], rollouts_per_prompt: int
    ) -> None:
        self.min_rollouts = int(min_rollouts)
        self.budget_of = budget_of
        self.rollouts_per_prompt = int(rollouts_per_prompt)
        #: the session slots of the refill being submitted; None: the step's first submission
        self.slots: int | None = None
        #: rollouts trimmed from submitted budgets since the last `pop_trimmed`
        self.trimmed = 0
        self._sized = False  # whether `size` ran within the current `submitting`
        self._unsized_said = False

    def slots_left(self, target: int, ready_sessions: int, in_flight: Iterable[str]) -> int:
        """``target`` - ``ready_sessions`` - the budgets of the ``in_flight`` groups (uids)."""
        reserved = 0
        for uid in in_flight:
            budget = self.budget_of(uid)
            reserved += self.rollouts_per_prompt if budget is None else int(budget)
        return int(target) - int(ready_sessions) - reserved

    @contextmanager
    def submitting(self, slots: int) -> Iterator[None]:
        """While a refill of at most ``slots`` sessions is submitted (``slots`` > 0). A refill that
        did not hand its prompts out through `size` (veRL's ``_add_prompts_to_generate`` no longer
        calling ``_next_train_batch``) went out unsized: said once, as a WARNING."""
        if slots <= 0:
            raise ValueError(f"a refill needs a free session slot, got slots={slots}")
        self.slots, self._sized = int(slots), False
        try:
            yield
        finally:
            self.slots = None
        if not self._sized and not self._unsized_said:
            self._unsized_said = True
            logger.warning(
                "coba.size_refills: a DAPO refill did not take its prompts through "
                "CobaTrainer._next_train_batch (veRL's refill is not 0.9.1's), so it was not sized"
            )

    def size(self, batch: TensorDict, loader: Any, target: int) -> TensorDict:
        """``batch`` (prompts with ``__rollout_n__``, in submission order) sized to the open slots
        (`size_submission`; ``target`` = M x n for the step's first submission). The prompts not
        submitted go back to the front of ``loader.round_rest`` with their budgets."""
        slots = int(target) if self.slots is None else self.slots
        self._sized = True
        budgets = batch["__rollout_n__"].tolist()
        sized = size_submission(budgets, slots, self.min_rollouts)
        if sized.prompts == len(budgets) and not sized.trimmed:
            return batch
        if not sized.prompts:  # `submitting` guarantees a slot, and a step starts with M x n of them
            raise RuntimeError(f"coba.size_refills: no session slot for a submission (slots={slots})")
        if sized.prompts < len(budgets):
            back = tu.index_select_tensor_dict(batch, list(range(sized.prompts, len(budgets))))
            rest = loader.round_rest
            loader.round_rest = back if rest is None else tu.concat_tensordict([back, rest])
        batch = tu.index_select_tensor_dict(batch, list(range(sized.prompts)))
        batch["__rollout_n__"] = torch.as_tensor(sized.budgets, dtype=torch.int64)
        self.trimmed += sized.trimmed
        logger.debug(
            "coba.size_refills: %d of %d prompts submitted for %d session slots (%d rollouts trimmed)",
            sized.prompts, len(budgets), slots, sized.trimmed,
        )  # fmt: skip
        return batch

    def pop_trimmed(self) -> int:
        """The rollouts trimmed since the last call (one step's ``coba/trimmed_rollouts``)."""
        trimmed, self.trimmed = self.trimmed, 0
        return trimmed


#: Prompt groups in a row that came back with no finished session after which a counted sample stops,
#: in rounds of M = ``data.train_batch_size`` prompts (`EmptyGroupWatch`).
EMPTY_GROUP_ROUNDS = 2


class EmptyGroupWatch:
    """Counts, during one counted sample, the prompt groups in a row that came back with no finished
    session, and stops the refills once `EMPTY_GROUP_ROUNDS` x M of them have (M: ``prompts_per_step``,
    ``data.train_batch_size``): every session failing (an engine that is down, a reward function that
    always raises) would otherwise be refilled without end, in the sync buffer and in the async one
    alike. A group with a finished session ends the run of empty ones (the count starts again at 0).

        M = 4: 7 empty groups in a row, over any number of polls, pass; the 8th raises
    """

    def __init__(self, prompts_per_step: int) -> None:
        if int(prompts_per_step) < 1:
            raise ValueError(f"prompts_per_step must be a positive prompt count, got {prompts_per_step}")
        self.limit = EMPTY_GROUP_ROUNDS * int(prompts_per_step)
        self.seen: set[str] = set()  # groups that came back during this sample
        self.empty_run = 0  # groups in a row with no finished session
        self.refilled = 0  # prompts submitted by this sample's refills

    def check(self, buffer: Any, partition_id: str) -> None:
        """Count the groups that came back since the last check (finished or failed).

        Raises:
            RuntimeError: naming the count, the prompts refilled and where to look.
        """
        returned = (buffer.finished_keys[partition_id] | buffer.failure_keys[partition_id]) - self.seen
        if not returned:
            return
        self.seen |= returned
        with_sessions = {uid_of(key) for key in buffer.partitions[partition_id]}
        self.empty_run = 0 if returned & with_sessions else self.empty_run + len(returned)
        if self.empty_run >= self.limit:
            raise RuntimeError(
                f"{self.empty_run} prompt groups in a row came back with every session failed "
                f"({self.refilled} prompts refilled for this step so far): the rollout engine, agent loop "
                "or reward function most likely fails every request; see the agent-loop workers' "
                "'Error in _run_prompt' log lines."
            )


def submitted_count(returned: Any, asked: int) -> int:
    """The prompts a refill submitted: what veRL's ``refill_fn`` returns (``_add_prompts_to_generate``:
    the length of the batch it submitted, after ``coba.size_refills`` trimmed it), or ``asked`` where
    the function returns no count.

        submitted_count(2, 4) -> 2    submitted_count(None, 4) -> 4
    """
    if isinstance(returned, (int, np.integer)) and not isinstance(returned, bool):
        return int(returned)
    return asked
