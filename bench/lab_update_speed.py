"""The lab's GRPO update with ``rows="all"`` vs ``rows="signal"``, measured side by side.

    python bench/lab_update_speed.py                     # S1-S3, half the groups all-equal, 5 pairs
    python bench/lab_update_speed.py --sizes S3 --zero-shares 0.25,0.5,0.75 --repeats 3

``signal`` (`coba_verl.lab.grpo.grpo_update`, ``coba-verl lab --update-rows signal``) forwards and
backpropagates only the rollouts with a non-zero advantage; the gradient is the same. The sizes are
the sizes study's scenarios (S1 ``paper``: 2 layers x 64, S2 ``paper_s2``: 3 x 128, S3
``paper_s3``: 4 x 160), each with its `paper` step: M = 32 prompts x n = 16 rollouts, two
mini-batches (``updates_per_step``), clip 0.2 / 0.28, AdamW at the scenario's learning rate.

The step batch: the first M training prompts of the scenario's seed-0 split, freshly initialised
model (seed 0; the time does not depend on the weights). A share ``--zero-shares`` of the groups,
picked at random, has all rewards equal (half all pass, half all fail: advantage 0); the others
pass with a random rate in (0, 1), at least one rollout passing and one failing. A passing
rollout's response is the prompt's answer, a failing one random digits of 1 to len(answer) + 1
characters, each then ``<eos>``: the warm-started lab's response lengths, not a random model's.

Each timed call starts from the same weights and a fresh optimiser; the two modes alternate (all
first in even pairs, signal first in odd ones) after one untimed call each. Printed per size:
median seconds of each mode (min-max), the median of the pairs' all / signal ratios, and the
distance between the two modes' weights after one update relative to the update's own size
(float rounding, which AdamW magnifies on weights whose gradient is near 0).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from coba_verl.arithmetic.task import make_splits
from coba_verl.arithmetic.tokenizer import build_tokenizer, encode_prompts
from coba_verl.arithmetic.warmstart import encode_answers
from coba_verl.lab.config import LabConfig
from coba_verl.lab.grpo import RolloutBatch, grpo_update, make_actor_config
from coba_verl.lab.seeds import new_model

SIZES = {"S1": "paper", "S2": "paper_s2", "S3": "paper_s3"}


def step_batch(cfg: LabConfig, zero_share: float, rng: np.random.Generator) -> RolloutBatch:
    """M x n rollouts of the scenario's first M training prompts, ``zero_share`` of the groups all-equal."""
    m, n = cfg.prompts_per_step, cfg.rollouts_per_prompt
    train, _ = make_splits(0, cfg.n_train, 1, levels=cfg.level_table)
    equal = rng.permutation(m) < round(zero_share * m)  # (M,) groups with advantage 0
    scores = np.zeros((m, n), np.float32)
    for g in range(m):
        if equal[g]:
            scores[g] = g % 2
        else:
            s = rng.random(n) < rng.uniform(0.1, 0.9)
            s[:2] = [True, False]  # a spread, wherever the draw put it
            scores[g] = rng.permutation(s)

    def wrong(answer: str) -> str:
        return "".join(rng.choice(list("0123456789"), rng.integers(1, len(answer) + 2)))

    answers = [a if scores[g, j] else wrong(a) for g, a in enumerate(train.answers[:m]) for j in range(n)]
    tok = build_tokenizer()
    p_ids, p_mask = encode_prompts(tok, [p for p in train.prompts[:m] for _ in range(n)])
    r_ids, r_mask = encode_answers(tok, answers)
    return RolloutBatch(p_ids, p_mask, r_ids, r_mask, scores.reshape(-1), np.repeat(np.arange(m), n))


def timed_update(cfg: LabConfig, model, state: dict, batch: RolloutBatch, rows: str) -> tuple[float, list]:
    """Seconds of one `grpo_update` from ``state`` with a fresh AdamW, and the weights after it."""
    model.load_state_dict(state)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    r = len(batch.scores)
    actor = make_actor_config(
        rollout_n=cfg.rollouts_per_prompt,
        mini_batch_size=-(-r // cfg.updates_per_step),
        clip_ratio_low=cfg.clip_ratio_low,
        clip_ratio_high=cfg.clip_ratio_high,
    )
    t0 = time.perf_counter()
    grpo_update(model, opt, batch, actor, grad_clip=cfg.grad_clip, rows=rows)
    return time.perf_counter() - t0, [p.detach().clone() for p in model.parameters()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="S1,S2,S3", help="comma-separated, of S1, S2, S3")
    parser.add_argument("--zero-shares", default="0.5", help="shares of all-equal groups, comma-separated")
    parser.add_argument("--repeats", type=int, default=5, help="timed pairs per row")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (the lab's default 1)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sizes = [s.strip() for s in args.sizes.split(",")]
    unknown = [s for s in sizes if s not in SIZES]
    if unknown:
        parser.error(f"--sizes {','.join(unknown)}: use some of {', '.join(SIZES)}")
    shares = [float(x) for x in args.zero_shares.split(",")]
    first = LabConfig.from_scenario(SIZES[sizes[0]])
    print(
        f"grpo_update, M x n = {first.prompts_per_step} x {first.rollouts_per_prompt}, "
        f"{first.updates_per_step} mini-batches, {args.threads} thread(s); {args.repeats} "
        "alternating pairs after one untimed call each; median (min-max)"
    )
    print(f"{'size':<4}{'layers x width':>16}{'zero share':>12}", end="")
    print(f"{'all s':>24}{'signal s':>24}{'all/signal':>12}{'|dθ| / |θ1-θ0|':>16}")
    for size in sizes:
        cfg = LabConfig.from_scenario(SIZES[size])
        model = new_model(cfg, build_tokenizer(), 0)
        state = {k: v.clone() for k, v in model.state_dict().items()}
        theta0 = [p.detach().clone() for p in model.parameters()]
        for share in shares:
            batch = step_batch(cfg, share, np.random.default_rng(args.seed))
            _, p_all = timed_update(cfg, model, state, batch, "all")
            _, p_sig = timed_update(cfg, model, state, batch, "signal")
            pairs = list(zip(theta0, p_all, p_sig, strict=True))
            step = sum(float((a - w).square().sum()) for w, a, _ in pairs) ** 0.5  # |θ1 - θ0|, all
            diff = sum(float((a - b).square().sum()) for _, a, b in pairs) ** 0.5  # |θ1 all - θ1 signal|
            times: dict[str, list[float]] = {"all": [], "signal": []}
            for rep in range(args.repeats):
                for rows in ("all", "signal") if rep % 2 == 0 else ("signal", "all"):
                    times[rows].append(timed_update(cfg, model, state, batch, rows)[0])
            t = {k: np.array(v) for k, v in times.items()}
            ratio = np.median(t["all"] / t["signal"])
            cells = [f"{np.median(t[k]):.3f} ({t[k].min():.3f}-{t[k].max():.3f})" for k in ("all", "signal")]
            shape = f"{cfg.num_layers} x {cfg.hidden_size}"
            print(f"{size:<4}{shape:>16}{share:>12.2f}{cells[0]:>24}{cells[1]:>24}", end="")
            print(f"{ratio:>11.2f}x{diff / step:>16.1e}")


if __name__ == "__main__":
    main()
