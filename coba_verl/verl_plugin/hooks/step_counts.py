"""What a V1 step trained and how old its sessions are, as ``coba/`` metrics.

`ledger_metrics` turns the step's rollout ledger (`coba_verl.records.ledger.StepTally`) into the
``coba/`` rollout counters, `trained_cost` counts what an update trains (rows, padding, tokens,
optimizer steps) and `session_versions` dates each scored session to the weights that finished it.
`coba_verl.verl_plugin.hooks.trainer.CobaBudgets` calls them each step.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from coba_verl.core.metrics import PREFIX
from coba_verl.records.ledger import StepTally
from coba_verl.verl_plugin.hooks.sessions import split_key

#: What an update costs, reported as ``coba/<name>`` (`trained_cost`); the rollout counters beside
#: them come from the step's ledger (`ledger_metrics`).
COST_COUNTS = ("trained_rows", "padding_rows", "tokens_trained", "optimizer_steps")


def ledger_metrics(tally: StepTally) -> dict[str, float]:
    """``coba/`` counters of one step's `StepTally`: rollouts generated, trained, cut, evicted,
    failed and in flight (``in flight before + generated = trained + cut + evicted + failed + in
    flight after``), groups trained and evicted, tokens generated, and how far behind the update the
    trained rollouts' policy versions are (0 in the synchronous trainer)."""
    metrics = {PREFIX + name: float(value) for name, value in tally.counts().items()}
    behind = tally.versions_behind
    metrics[PREFIX + "versions_behind_mean"] = float(np.mean(behind)) if behind else 0.0
    metrics[PREFIX + "versions_behind_max"] = float(max(behind)) if behind else 0.0
    if tally.evicted_budgets:
        metrics[PREFIX + "evicted_budget_mean"] = float(np.mean(tally.evicted_budgets))
    return metrics


def session_versions(
    groups: Mapping[str, Mapping[int, str]], tags: Mapping[str, Mapping]
) -> dict[tuple[str, int], int]:
    """The policy version that finished each session of ``groups`` (``uid -> {session: final key}``),
    from its outputs' trajectory tags (``key -> tag``): ``(uid, session) -> max_global_steps + 1``,
    the newest over the session's outputs; sessions whose tags carry no ``max_global_steps`` are left out
    (they are of their group's version).

    Which version: veRL's server keeps, per request, the weight versions it was generated across
    (``min_global_steps`` / ``max_global_steps``, ``verl/workers/rollout/llm_server.py:281-349``): an
    answer aborted at a weight update and resumed with its tokens spans two. It is dated to the
    newest, the weights that wrote its end and so the answer the reward scores: F_v is the failure
    rate of policy v (spec §3, F_t "the step's" failure rate), and the allocation that F_bar drives
    serves the newest policy, so an answer the newer weights finished is evidence about them, not
    about the weights that only began it. It is also veRL's own primary staleness
    (``trajectory_staleness``, ``trainer_base.py:1968-1979``), which counts from ``max_global_steps``.

    Numbering: veRL loads the weights trained at step t as version t (``update_weights(global_steps)``
    at the step's end: ``trainer_sync.py:38``, ``trainer_colocate_async.py:40``,
    ``trainer_separate_async.py:382``), and they serve the prompts submitted at step t + 1, which the
    ledger dates t + 1. So weights w date a session w + 1, and a session generated entirely under its
    submission's weights keeps its group's version; versions behind = the update's step minus this
    is veRL's ``trajectory_staleness = (global_steps - 1) - max_global_steps`` (``trainer_base.py:1979``).

    ``{"a": {0: "a_0_1"}}`` with tags a_0_0 (max_global_steps 2), a_0_1 (3) -> ``{("a", 0): 4}``.
    """
    newest: dict[tuple[str, int], int] = {}
    for key, tag in tags.items():
        weights = tag.get("max_global_steps")
        if weights is None or tag.get("is_padding", False):
            continue
        uid, session, _ = split_key(key)
        if uid in groups and session in groups[uid]:
            newest[uid, session] = max(newest.get((uid, session), int(weights)), int(weights))
    return {pair: weights + 1 for pair, weights in newest.items()}


def trained_cost(tags: list[Mapping], mini_batch_rows: int, epochs: int) -> dict[str, int]:
    """What an update trains: sessions, rows and response tokens of the real rows, padding rows, and
    optimizer steps = ceil(rows with padding / mini-batch rows) x ppo_epochs, as veRL's actor splits
    its batch (``global_batch_size`` = ppo_mini_batch_size x rollout.n rows a mini-batch).

    Rows are trajectory keys ``{uid}_{session}_{output}``; a multi-turn session has several.
    """
    real = [tag for tag in tags if not tag.get("is_padding", False)]
    return {
        "trained_rows": len(real),
        "padding_rows": len(tags) - len(real),
        "tokens_trained": sum(int(tag.get("response_len", 0)) for tag in real),
        "optimizer_steps": -(-len(tags) // mini_batch_rows) * epochs if tags else 0,
    }
