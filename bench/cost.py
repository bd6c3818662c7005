"""What a step costs: response tokens and a generation makespan model, uniform GRPO against CoBA
under a rollout budget and under a token budget, measured side by side in one run.

    python bench/cost.py               # 4 profiles x 3 strategies x 20 simulated steps, seconds
    python bench/cost.py --steps 50 --prompts 256 --n 16

Each simulated step draws M prompts from a profile (true pass rate p_i and true mean answer length
mu_i, both stated below), gives the allocator what a tracker would know (p_hat_i and L_i from
k x n = 3 x n earlier rollouts of the prompt, as after three appearances), allocates, then "generates":
each rollout's length is drawn around mu_i (gamma, coefficient of variation 0.5, capped at the
profile's max_response_length). Reported per strategy, as ratios to uniform's of the same step:

* tokens: response tokens generated (the same as trained without DAPO);
* makespan: decode iterations until the last answer, with `REPLICAS` engines of `SLOTS` concurrent
  sequences each, every request sent at once and routed to the replica with the fewest in flight
  (veRL's router: with everything sent at once, round robin), each replica serving its queue first
  come first served, one token per running sequence per iteration.

Profiles (stated, not fitted to any data set):

* ``gsm8k``: an instruct model on grade-school maths: p ~ Beta(4, 1.2) for 70 % of prompts, Beta(1, 1)
  for 30 %; mu = 180 + 250 (1 - p) tokens; max 1024.
* ``dapo_math``: a 7B model on competition maths: p ~ Beta(0.4, 2.5) for 45 %, Beta(1, 1.5) for 35 %,
  Beta(3, 1) for 20 %; mu = 400 + 2000 (1 - p) tokens (hard prompts, long answers); max 8192.
* ``dapo_late``: the same maths later in training, most prompts solved: p ~ Beta(3, 1) for 50 %,
  Beta(1, 1) for 30 %, Beta(0.4, 2.5) for 20 %; the same lengths. The failure rate is low, so CoBA's
  Beta mode sits at hard prompts (explore), which have the long answers.
* ``flat``: the dapo_math pass rates with mu = 1200 whatever p (length independent of difficulty).

The Beta shape is derived from the batch's failure rate as `coba_verl.allocate` does (spec §3), so
early (``dapo_math``) CoBA favours easy prompts and late (``dapo_late``) hard ones.
"""

from __future__ import annotations

import argparse
import heapq

import numpy as np

from coba_verl import allocate

REPLICAS, SLOTS = 8, 256
LOW, UP = 2, 128
PROFILES = {
    # name: (mixture of Beta(a, b) with weights, length intercept, length slope on (1 - p), cap)
    "gsm8k": ([(0.7, 4.0, 1.2), (0.3, 1.0, 1.0)], 180.0, 250.0, 1024),
    "dapo_math": ([(0.45, 0.4, 2.5), (0.35, 1.0, 1.5), (0.2, 3.0, 1.0)], 400.0, 2000.0, 8192),
    "dapo_late": ([(0.5, 3.0, 1.0), (0.3, 1.0, 1.0), (0.2, 0.4, 2.5)], 400.0, 2000.0, 8192),
    "flat": ([(0.45, 0.4, 2.5), (0.35, 1.0, 1.5), (0.2, 3.0, 1.0)], 1200.0, 0.0, 8192),
}
STRATEGIES = ("uniform", "coba (rollouts)", "coba (tokens)")


def draw_prompts(profile: str, m: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(M,) true pass rates and (M,) true mean answer lengths of a profile."""
    mixture, intercept, slope, _ = PROFILES[profile]
    weights = np.array([w for w, _, _ in mixture])
    which = rng.choice(len(mixture), size=m, p=weights / weights.sum())
    p = np.array([rng.beta(mixture[j][1], mixture[j][2]) for j in which])
    return p, intercept + slope * (1.0 - p)


def draw_lengths(mu: np.ndarray, cap: int, rng: np.random.Generator) -> np.ndarray:
    """One answer length per entry of ``mu``: gamma with mean mu and CV 0.5, in [1, cap]."""
    shape = 4.0  # CV = 1 / sqrt(shape)
    return np.clip(np.rint(rng.gamma(shape, mu / shape)), 1, cap)


def makespan(request_lengths: list[np.ndarray]) -> float:
    """Decode iterations until the last answer: requests (grouped by prompt, in submission order)
    go round robin to `REPLICAS` replicas; each serves its queue FCFS on `SLOTS` slots."""
    flat = np.concatenate(request_lengths)
    worst = 0.0
    for r in range(REPLICAS):
        queue = flat[r::REPLICAS]
        free = [0.0] * min(SLOTS, max(queue.size, 1))
        heapq.heapify(free)
        end = 0.0
        for length in queue:
            start = heapq.heappop(free)
            heapq.heappush(free, start + float(length))
            end = max(end, start + float(length))
        worst = max(worst, end)
    return worst


def simulate_step(profile: str, m: int, n: int, rng: np.random.Generator) -> dict[str, tuple[float, float]]:
    """{strategy: (tokens, makespan)} of one step on the same prompts."""
    p, mu = draw_prompts(profile, m, rng)
    cap = PROFILES[profile][3]
    seen = 3 * n  # what the tracker holds: k = 3 appearances of n rollouts
    p_hat = rng.binomial(seen, p) / seen
    l_hat = np.array([draw_lengths(np.full(seen, x), cap, rng).mean() for x in mu])
    budgets = {
        "uniform": np.full(m, n),
        "coba (rollouts)": allocate(p_hat, m * n, LOW, UP),
        "coba (tokens)": allocate(p_hat, m * n, LOW, UP, lengths=l_hat),
    }
    out = {}
    for name, b in budgets.items():
        lengths = [draw_lengths(np.full(int(k), x), cap, rng) for k, x in zip(b, mu, strict=True)]
        out[name] = (float(sum(x.sum() for x in lengths)), makespan(lengths))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="simulated steps per profile")
    parser.add_argument("--prompts", type=int, default=512, help="M, prompts a step")
    parser.add_argument("--n", type=int, default=8, help="rollouts per prompt of uniform GRPO")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    layout = f"{REPLICAS} replicas x {SLOTS} slots"
    print(f"M = {args.prompts}, n = {args.n}, [{LOW}, {UP}], {layout}, {args.steps} steps")
    print(f"{'profile':<10} {'strategy':<16} {'tokens / uniform':>22} {'makespan / uniform':>22}")
    for profile in PROFILES:
        ratios: dict[str, list[tuple[float, float]]] = {name: [] for name in STRATEGIES}
        for _ in range(args.steps):
            step = simulate_step(profile, args.prompts, args.n, rng)
            base_tokens, base_span = step["uniform"]
            for name in STRATEGIES:
                ratios[name].append((step[name][0] / base_tokens, step[name][1] / base_span))
        for name in STRATEGIES:
            r = np.asarray(ratios[name])
            tok, span = r[:, 0], r[:, 1]
            print(
                f"{profile:<10} {name:<16} {tok.mean():>8.3f} [{tok.min():.3f}, {tok.max():.3f}]"
                f" {span.mean():>8.3f} [{span.min():.3f}, {span.max():.3f}]"
            )
    print("ratios: mean [min, max] over the steps, each against uniform on the same prompts")


if __name__ == "__main__":
    main()
