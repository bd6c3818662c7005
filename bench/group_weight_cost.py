"""The cost of ``coba.group_weight=equal`` in veRL's V1 trainer, beside veRL's own advantage pass.

    python bench/group_weight_cost.py                    # M = 512, n = 16, answers 1000-4000 tokens
    python bench/group_weight_cost.py --prompts 64 --repeats 2       # a quick look
    python bench/group_weight_cost.py --no-transfer-queue            # the tensor work only, no Ray

With ``equal``, `CobaTrainer._compute_advantage` multiplies each session's advantage by
(R / G) / B_g (`group_weight_of_keys`). On veRL 0.9.1 it does so inside veRL's pass
(`weighted_advantage_pass`: veRL's steps, the factor on the padded advantages, one write); on any
other veRL it runs veRL's ``_compute_advantage`` and then `weight_written_advantages` (the
advantages read back, scaled on their flat values, written again). This bench times both routes
beside veRL's pass on the same step, on CPU, in two parts:

1. **Tensor work, no TransferQueue.** veRL's part: ``to_padded_tensor`` of the fields its pass
   reads, ``compute_advantage_for_multi_trajectories`` (which calls
   ``core_algos.compute_grpo_outcome_advantage``), ``response_to_nested`` of advantages and
   returns; and ``compute_grpo_outcome_advantage`` alone on the padded tensors. The weight's part
   on the inside route: `group_weight_of_keys` and `scale_rows` on the padded advantages.
2. **With TransferQueue** (a local Ray, ``num_cpus=2``, TransferQueue from veRL's config node with
   one SimpleStorage unit, as the plugin tests run it): the step's rollouts are put as veRL's agent
   loop puts them (``list_of_dict_to_tensordict``, keys ``{uid}_{session}_0``), then, in pairs and
   in alternating order, veRL's own ``PPOTrainer._compute_advantage`` and the inside route
   (`group_weight_of_keys` + `weighted_advantage_pass`), each on a stand-in ``self`` holding what
   the pass reads (the composed config); and the after route's extra round trip alone.

The budgets are CoBA's (`coba_verl.core.allocate` on spread pass rates), so group sizes differ
and the weight is not skipped. Times are the median of ``--repeats`` runs; the inside route's
share is the median over pairs of (inside - veRL) / veRL. Before each run of a whole pass the
step's fields are put again. Nothing else of a step (generation, log-probs, the update) is measured.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from importlib import resources
from types import SimpleNamespace

import numpy as np
import torch
from tensordict import TensorDict

from coba_verl.core import allocate

WEIGHT_TENSOR = "group weight, inside route (tensor work)"
VERL_TENSOR = "veRL's advantage pass (tensor work)"
VERL_TQ = "veRL's _compute_advantage (TransferQueue)"
INSIDE_TQ = "veRL's pass with the weight inside (TransferQueue)"
AFTER_TQ = "after route, its extra read and write (TransferQueue)"
INSIDE_SHARE = "inside route's extra, share of veRL's pass (median over pairs)"
INSIDE_SHARE_RANGE = "inside route's extra, least and most over pairs"


def step_rollouts(
    m: int, n: int, low: int, high: int, seed: int
) -> tuple[list[str], list[int], np.ndarray, np.ndarray]:
    """Keys ``{uid}_{session}_0``, response lengths, 0/1 scores and the (M,) budgets of one step
    under CoBA budgets."""
    rng = np.random.default_rng(seed)
    pass_rates = rng.choice(np.arange(17) / 16.0, size=m)
    budgets = allocate(pass_rates, m * n, 2, 128)  # (M,), sums to M * n
    keys, lengths, scores = [], [], []
    for g, (b, p) in enumerate(zip(budgets.tolist(), pass_rates.tolist(), strict=True)):
        for s in range(b):
            keys.append(f"u{g:05d}_{s}_0")
        lengths += rng.integers(low, high + 1, size=b).tolist()
        scores += (rng.random(b) < p).astype(float).tolist()
    return keys, lengths, np.asarray(scores), budgets


def agent_loop_fields(keys: list[str], lengths: list[int], scores: np.ndarray) -> TensorDict:
    """The fields of the step's rollouts, as the agent loop and the workers leave them (nested)."""
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    gen = torch.Generator().manual_seed(0)
    rows = []
    for key, length, score in zip(keys, lengths, scores.tolist(), strict=True):
        rm = torch.zeros(length)
        rm[-1] = score
        rows.append(
            {
                "uid": key.split("_", 1)[0],
                "response_mask": torch.ones(length, dtype=torch.int64),
                "rm_scores": rm,
                "rollout_log_probs": -torch.rand(length, generator=gen),
                "old_log_probs": -torch.rand(length, generator=gen),
                "ref_log_prob": -torch.rand(length, generator=gen),
            }
        )
    return list_of_dict_to_tensordict(rows)


def median_time(fn: Callable[[], object], repeats: int, reset: Callable[[], None] | None = None) -> float:
    times = []
    for _ in range(repeats):
        if reset is not None:
            reset()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def composed_config():
    """``coba_trainer`` as ``python -m coba_verl.main`` composes it, with one storage unit."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(resources.files("coba_verl") / "config"), version_base=None):
        return compose(
            config_name="coba_trainer",
            overrides=[
                "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
                "actor_rollout_ref.rollout.n=16",
            ],
        )


def tensor_part(keys, tags, fields: TensorDict, repeats: int) -> dict[str, float]:
    from verl import DataProto
    from verl.trainer.ppo import core_algos
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories
    from verl.workers.utils.padding import response_to_nested

    from coba_verl.verl_plugin.hooks.advantage import VERL_ADVANTAGE_FIELDS, group_weight_of_keys, scale_rows

    # the fields veRL's pass pads: those it reads but the uid (not a tensor) and values (no critic in GRPO)
    padded_fields = [field for field in VERL_ADVANTAGE_FIELDS if field not in ("uid", "values")]

    uids = np.asarray([key.split("_", 1)[0] for key in keys], dtype=object)
    mask_nested = fields["response_mask"]

    def verl_pass():
        data = DataProto(batch=fields.select(*padded_fields).to_padded_tensor())
        data.batch["token_level_scores"] = data.batch["rm_scores"]
        data.batch["token_level_rewards"] = data.batch["token_level_scores"]
        data.non_tensor_batch["uid"] = uids
        data = compute_advantage_for_multi_trajectories(
            data, batch_keys=keys, adv_estimator=core_algos.AdvantageEstimator.GRPO, num_repeat=16
        )
        return [response_to_nested(data.batch[f], mask_nested) for f in ("advantages", "returns")]

    padded = fields.select("rm_scores", "response_mask").to_padded_tensor()
    rewards, mask = padded["rm_scores"], padded["response_mask"]  # (R, T)

    def grpo_only():
        return core_algos.compute_grpo_outcome_advantage(rewards, mask, uids)

    advantages = torch.zeros_like(rewards)  # (R, T), as veRL's pass holds them before unpadding

    def weight():
        return scale_rows(advantages, group_weight_of_keys(keys, tags, "equal"))

    return {
        VERL_TENSOR: median_time(verl_pass, repeats),
        "  of which compute_grpo_outcome_advantage": median_time(grpo_only, repeats),
        WEIGHT_TENSOR: median_time(weight, repeats),
    }


def transfer_queue_part(keys, tags, fields: TensorDict, repeats: int) -> dict[str, object]:
    import ray
    import transfer_queue as tq
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from coba_verl.verl_plugin.hooks.advantage import (
        group_weight_of_keys,
        weight_written_advantages,
        weighted_advantage_pass,
    )

    config = composed_config()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        tq.init(config.transfer_queue)
        trainer = SimpleNamespace(config=config)

        def put():  # the step's rollouts as the agent loop and the workers leave them
            tq.kv_batch_put(keys=keys, partition_id="train", fields=fields, tags=tags)

        put()
        meta = tq.kv_batch_put(keys=keys, partition_id="train", tags=tags)

        def verl_pass():
            PPOTrainer._compute_advantage(trainer, meta, {})

        def inside_route():
            factors = group_weight_of_keys(keys, tags, "equal")
            weighted_advantage_pass(trainer, meta, {}, factors)

        verl_times, inside_times = [], []
        for r in range(repeats):  # pairs, alternating which runs first
            for fn, times in ((verl_pass, verl_times), (inside_route, inside_times))[
                :: 1 if r % 2 == 0 else -1
            ]:
                times.append(median_time(fn, 1, put))
        after_s = median_time(
            lambda: weight_written_advantages(meta, group_weight_of_keys(keys, tags, "equal")), repeats
        )
        tq.kv_clear(keys=keys, partition_id="train")
        tq.close()
    finally:
        ray.shutdown()
    shares = [(i - v) / v for v, i in zip(verl_times, inside_times, strict=True)]
    return {
        VERL_TQ: statistics.median(verl_times),
        INSIDE_TQ: statistics.median(inside_times),
        AFTER_TQ: after_s,
        INSIDE_SHARE: statistics.median(shares),
        INSIDE_SHARE_RANGE: (min(shares), max(shares)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=512, help="M, prompts per step")
    parser.add_argument("--rollouts", type=int, default=16, help="n, mean rollouts per prompt")
    parser.add_argument("--min-length", type=int, default=1000, help="shortest answer, tokens")
    parser.add_argument("--max-length", type=int, default=4000, help="longest answer, tokens")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-transfer-queue", action="store_true", help="part 1 only (no Ray)")
    args = parser.parse_args()
    torch.manual_seed(args.seed)

    keys, lengths, scores, budgets = step_rollouts(
        args.prompts, args.rollouts, args.min_length, args.max_length, args.seed
    )
    tags = [{"status": "success", "response_len": n} for n in lengths]
    fields = agent_loop_fields(keys, lengths, scores)
    print(
        f"M={args.prompts} prompts, R={len(keys)} rollouts (CoBA budgets {budgets.min()}-{budgets.max()}), "
        f"answers {args.min_length}-{args.max_length} tokens "
        f"(mean {np.mean(lengths):.0f}), torch threads {torch.get_num_threads()}, median of {args.repeats}"
    )
    rows = tensor_part(keys, tags, fields, args.repeats)
    if not args.no_transfer_queue:
        rows |= transfer_queue_part(keys, tags, fields, args.repeats)
    share = rows.pop(INSIDE_SHARE, None)
    low, high = rows.pop(INSIDE_SHARE_RANGE, (None, None))
    width = max(map(len, rows))
    for name, seconds in rows.items():
        print(f"{name:<{width}}  {seconds * 1e3:9.1f} ms")
    print(f"group weight / veRL's pass, tensor work: {rows[WEIGHT_TENSOR] / rows[VERL_TENSOR]:.3f}")
    if share is not None:
        print(f"inside route: veRL's pass {rows[INSIDE_TQ] / rows[VERL_TQ]:.3f}x, "
              f"its extra {share:+.3f} of veRL's pass (median over {args.repeats} pairs; "
              f"{low:+.3f} to {high:+.3f})")  # fmt: skip
        print(f"after route: its extra read and write {rows[AFTER_TQ] / rows[VERL_TQ]:.3f} of veRL's pass")


if __name__ == "__main__":
    main()
