"""The group weight in veRL's V1 advantage pass (docs/verl.md, "Group weight"; docs/algorithm.md).

With ``coba.group_weight=equal`` every trained session's GRPO advantage is multiplied by
(R / G) / B_g (`group_weight_of_keys`), so each prompt group of the step weighs R / G in all,
whatever its budget B_g. Two routes put that factor on the advantages veRL trains:

* **inside** veRL's pass (`weighted_advantage_pass`, the default): veRL 0.9.1's
  ``PPOTrainer._compute_advantage`` (``verl/trainer/ppo/v1/trainer_base.py:1743-1802``) reads the
  step's fields from TransferQueue, pads them, applies the KL penalty and the rollout correction
  when configured, computes GRPO per session (``compute_advantage_for_multi_trajectories``) and
  writes advantages and returns back, in one body with no step between computing and writing. The
  route composes the same veRL functions in the same order and multiplies the padded advantages by
  the factors just before the one write: no second read or write of the advantages.
* **after** veRL's pass (`weight_written_advantages`): veRL's own method, then the advantages read
  back, scaled on their flat values and written again: a fifth of veRL's pass more at M = 512,
  n = 16 (``bench/group_weight_cost.py``; docs/verl.md, "What the weight costs").

The inside route stands for veRL's method, so it is taken only while that method is the one it was
written against: `advantage_route` checks that the method a trainer would call is veRL's own
``PPOTrainer._compute_advantage`` and that its source digest is `VERL_ADVANTAGE_SHA256` (veRL
0.9.1's). Any other veRL, a base class that overrides the method or a wrapper around it gets the
after route; the trainer names its route in one INFO line at start (under ``equal``). Both routes
give the same advantages bit for bit (``tests/verl_plugin/test_verl_advantage_pass.py``).
``returns`` keep veRL's values on both: GRPO trains no critic.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Literal

import numpy as np
import torch
import transfer_queue as tq
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1 import trainer_base

from coba_verl.core.group_weight import check_group_weight, rollout_weights
from coba_verl.verl_plugin.hooks.sessions import split_key
from coba_verl.verl_plugin.hooks.verl_guards import source_sha256

logger = logging.getLogger(__name__)

#: sha256 of ``inspect.getsource(PPOTrainer._compute_advantage)`` in veRL 0.9.1: the body
#: `weighted_advantage_pass` composes.
VERL_ADVANTAGE_SHA256 = "2a4a2aa4a475b228d401959818e0b9019276ce27961c133961de217baa387da7"

#: The fields veRL 0.9.1's advantage pass reads back from TransferQueue (trainer_base.py:1745).
VERL_ADVANTAGE_FIELDS = [
    "uid", "response_mask", "rm_scores", "rollout_log_probs", "old_log_probs", "ref_log_prob", "values"
]  # fmt: skip

Route = Literal["inside", "after"]


def scale_rows(values: torch.Tensor, factors: np.ndarray) -> torch.Tensor:
    """Row r of ``values`` times ``factors[r]``: a jagged nested tensor (R, j) as TransferQueue
    returns responses, scaled on its flat values (no padding, no mask), or a dense (R, T) one.

        values  [[a, b], [c], [d, e, f]]     factors [2, 1, 0.5]  ->  [[2a, 2b], [c], [d/2, e/2, f/2]]
    """
    weights = torch.as_tensor(factors, dtype=values.dtype, device=values.device)  # (R,)
    if not values.is_nested:
        return values * weights.reshape(-1, *([1] * (values.dim() - 1)))
    offsets = values.offsets()  # (R + 1,)
    flat = values.values() * torch.repeat_interleave(weights, offsets.diff())  # (sum_r j_r,)
    return torch.nested.nested_tensor_from_jagged(flat, offsets)


def group_weight_of_keys(keys: list[str], tags: list[Mapping], group_weight: str) -> np.ndarray:
    """Advantage factor of each trajectory key of a trained batch (`rollout_weights` per session).

    A rollout is a session ``{uid}_{session}``: R counts the batch's sessions, G its uids, B_g the
    sessions of uid g that reached the batch (a failed session is not trained, so it does not
    count). Every output of a session shares its factor; padding rows keep 1.

        keys     a_0_0 a_0_1 a_1_0 b_0_0 pad7f_0_0       (R = 3 sessions, G = 2 groups)
        factor   3/4   3/4   3/4   3/2   1               (equal: (R / G) / B_g)

    Returns:
        (len(keys),) float64.
    """
    factors = np.ones(len(keys), dtype=np.float64)
    if check_group_weight(group_weight) == "proportional":
        return factors
    rows: list[int] = []  # the batch rows that are not padding
    row_session: list[int] = []  # each one's session, numbered in order of first appearance
    sessions: dict[tuple[str, int], int] = {}  # (uid, session) -> its number
    for i, (key, tag) in enumerate(zip(keys, tags, strict=True)):
        if not tag.get("is_padding", False):
            uid, session, _ = split_key(key)  # "a_0_1" -> ("a", 0, 1)
            rows.append(i)
            row_session.append(sessions.setdefault((uid, session), len(sessions)))
    if rows:
        uids = np.asarray([uid for uid, _ in sessions])  # (R,) the group of each session
        factors[rows] = rollout_weights(uids, group_weight)[row_session]
    return factors


def advantage_route(verl_method: Callable[..., Any]) -> Route:
    """``"inside"`` where ``verl_method`` (the ``_compute_advantage`` a trainer would call) is veRL's
    ``PPOTrainer._compute_advantage`` itself (no override, no wrapper) and its source is veRL
    0.9.1's, whose body `weighted_advantage_pass` composes; ``"after"`` for any other."""
    own = trainer_base.PPOTrainer.__dict__["_compute_advantage"]
    if getattr(verl_method, "__func__", verl_method) is not own:
        return "after"
    return "inside" if source_sha256(own) == VERL_ADVANTAGE_SHA256 else "after"


def weighted_advantage_pass(
    trainer: Any, batch: KVBatchMeta, metrics: dict, factors: np.ndarray
) -> KVBatchMeta:
    """veRL 0.9.1's ``PPOTrainer._compute_advantage`` with the advantages times ``factors`` (R,)
    before its one write to TransferQueue; ``factors`` of ones gives veRL's pass exactly.

    Steps as veRL numbers them (trainer_base.py:1743-1802): read ``VERL_ADVANTAGE_FIELDS`` and pad;
    1. the KL penalty in the reward (``algorithm.use_kl_in_reward``); 2. the rollout correction
    (decoupled mode, with rollout log-probs); 3. GRPO per session; then the factor on each row's
    advantages (``returns`` stay veRL's); 4. the nested fields written back. Each function is taken
    from veRL's ``trainer_base`` module at call time, where veRL's method finds it.

    Args:
        trainer: the V1 trainer (``config``, and ``kl_ctrl_in_reward`` when the KL is in the reward).
        batch: the step's trajectory keys (veRL's ``KVBatchMeta``).
        metrics: the step's metrics; the KL and rollout-correction metrics are added, as veRL does.
        factors: (len(batch),) float, one per key in ``batch.keys`` order (`group_weight_of_keys`).
    """
    config = trainer.config
    data = trainer_base.tq.kv_batch_get(
        keys=batch.keys, partition_id=batch.partition_id, select_fields=VERL_ADVANTAGE_FIELDS
    )
    response_mask = data["response_mask"]  # nested (R, j)
    data = trainer_base.DataProto(batch=data.to_padded_tensor())
    data.batch["token_level_scores"] = data.batch["rm_scores"]
    data.non_tensor_batch["uid"] = np.array(data.batch.pop("uid").tolist(), dtype=object)

    if config.algorithm.use_kl_in_reward:
        data, kl_metrics = trainer_base.apply_kl_penalty(
            data, kl_ctrl=trainer.kl_ctrl_in_reward, kl_penalty=config.algorithm.kl_penalty
        )
        metrics.update(kl_metrics)
    else:
        data.batch["token_level_rewards"] = data.batch["token_level_scores"]

    rollout_corr_config = config.algorithm.get("rollout_correction", None)
    bypass = rollout_corr_config and rollout_corr_config.get("bypass_mode", False)
    rollout_correction = rollout_corr_config is not None and "rollout_log_probs" in data.batch and not bypass
    if rollout_correction:
        data, is_metrics = trainer_base.compute_rollout_correction_and_add_to_batch(data, rollout_corr_config)
        metrics.update(is_metrics)

    data = trainer_base.compute_advantage_for_multi_trajectories(
        data,
        batch_keys=batch.keys,
        adv_estimator=config.algorithm.adv_estimator,
        gamma=config.algorithm.gamma,
        lam=config.algorithm.lam,
        num_repeat=config.actor_rollout_ref.rollout.n,
        norm_adv_by_std_in_grpo=config.algorithm.get("norm_adv_by_std_in_grpo", True),
        config=config.algorithm,
    )
    # a new tensor: veRL's advantages and returns are one tensor, and returns keep veRL's values
    data.batch["advantages"] = scale_rows(data.batch["advantages"], factors)  # (R, T)

    fields = ["advantages", "returns"]
    if config.algorithm.use_kl_in_reward:
        fields.append("token_level_rewards")
    if rollout_correction:
        fields.append("response_mask")
        if "rollout_is_weights" in data.batch:
            fields.append("rollout_is_weights")
    nested = {field: trainer_base.response_to_nested(data.batch[field], response_mask) for field in fields}
    output = trainer_base.TensorDict(nested, batch_size=len(batch))
    return trainer_base.tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=output)


def weight_written_advantages(batch: KVBatchMeta, factors: np.ndarray) -> KVBatchMeta:
    """The after route: the advantages veRL wrote to TransferQueue, read back, times ``factors``
    on their flat values (`scale_rows`: no response mask, no padding) and written again."""
    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["advantages"])
    fields = TensorDict({"advantages": scale_rows(data["advantages"], factors)}, batch_size=len(batch))
    return tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=fields)
