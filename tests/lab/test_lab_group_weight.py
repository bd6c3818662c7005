"""``coba.group_weight`` in the lab's update: ``proportional`` is today's update, ``equal`` gives every
prompt group of a step the same total advantage weight (R / G), exactly 1x under uniform."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from verl.trainer.ppo import core_algos

from coba_verl.arithmetic.task import Split
from coba_verl.arithmetic.tokenizer import build_tokenizer, encode_prompts
from coba_verl.core.group_weight import rollout_weights
from coba_verl.lab import runner
from coba_verl.lab.config import LabConfig, RunSpec, parse_run_label
from coba_verl.lab.grpo import RolloutBatch, grpo_update, make_actor_config
from coba_verl.lab.seeds import build_context, new_model

TINY = {"hidden_size": 32, "num_layers": 1, "intermediate_size": 64, "warm_steps": 0}


def _batch(index: list[int], scores: list[float]) -> RolloutBatch:
    tok = build_tokenizer()
    n = len(index)
    p_ids, p_mask = encode_prompts(tok, ["1+2="] * n)
    digits = [str(d % 10) for d in range(n)]
    r_ids, r_mask = encode_prompts(tok, digits)  # one token per response, left-padded: fine
    return RolloutBatch(
        p_ids, p_mask, r_ids, r_mask, np.asarray(scores, dtype=np.float32), np.asarray(index, dtype=np.int64)
    )


def _update(batch: RolloutBatch, group_weight: str | None, monkeypatch: pytest.MonkeyPatch):
    """(advantages the policy loss saw, parameters after one update) from the same start."""
    seen: list[torch.Tensor] = []
    vanilla = core_algos.get_policy_loss_fn("vanilla")

    def recording(**kw):
        seen.append(kw["advantages"].detach().clone())
        return vanilla(**kw)

    monkeypatch.setitem(core_algos.POLICY_LOSS_REGISTRY, "lab_gw_rec", recording)
    cfg = LabConfig(**TINY)
    model = new_model(cfg, build_tokenizer(), 0)
    actor = make_actor_config(
        rollout_n=4, mini_batch_size=len(batch.scores), clip_ratio_low=0.2, clip_ratio_high=0.28,
        loss_mode="lab_gw_rec",
    )  # fmt: skip
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    kw = {} if group_weight is None else {"group_weight": group_weight}
    grpo_update(model, opt, batch, actor, **kw)
    return seen[0], [p.detach().clone() for p in model.parameters()]


def test_equal_under_uniform_sizes_is_bit_identical_to_proportional(monkeypatch: pytest.MonkeyPatch) -> None:
    batch = _batch([0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2], [1, 0, 1, 0, 1, 1, 0, 0, 0, 0, 0, 1])
    adv_default, params_default = _update(batch, None, monkeypatch)
    for mode in ("proportional", "equal"):
        adv, params = _update(batch, mode, monkeypatch)
        assert torch.equal(adv, adv_default), mode
        assert all(torch.equal(a, b) for a, b in zip(params, params_default, strict=True)), mode


def test_equal_gives_every_group_the_same_weight_sum(monkeypatch: pytest.MonkeyPatch) -> None:
    # groups of 6, 2 and 4 rollouts (R = 12, G = 3), interleaved; every group has a learning signal
    index = [0, 0, 1, 0, 2, 0, 2, 1, 0, 2, 0, 2]
    scores = [1, 0, 1, 0, 1, 1, 0, 0, 0, 0, 0, 1]
    batch = _batch(index, scores)
    adv_proportional, params_proportional = _update(batch, "proportional", monkeypatch)
    adv_equal, params_equal = _update(batch, "equal", monkeypatch)
    ratio = (adv_equal[:, 0] / adv_proportional[:, 0]).double().numpy()  # (R,) the factor each rollout got
    np.testing.assert_allclose(ratio, rollout_weights(np.asarray(index), "equal"), rtol=1e-6)
    sums = np.bincount(index, weights=ratio)  # (G,) total weight per group
    np.testing.assert_allclose(sums, [12 / 3] * 3, rtol=1e-6)
    np.testing.assert_allclose(ratio.sum(), 12, rtol=1e-6)  # the batch's total weight is kept
    assert any(not torch.equal(a, b) for a, b in zip(params_proportional, params_equal, strict=True))


def test_run_label_sets_the_group_weight_of_one_run() -> None:
    assert parse_run_label("coba:equal@0.5") == RunSpec("coba", 0.5, "equal")
    assert parse_run_label("knapsack:equal").label == "knapsack:equal"
    assert parse_run_label("coba").group_weight is None
    cfg = LabConfig(**TINY, coba={"group_weight": "equal"})
    assert cfg.coba_config("coba").group_weight == "equal"
    assert cfg.coba_config("coba", "proportional").group_weight == "proportional"


def test_run_label_old_spelling_tokens_names_proportional() -> None:
    with pytest.warns(DeprecationWarning, match="'tokens' is deprecated"):
        spec = parse_run_label("coba:tokens@0.5")
    assert spec == RunSpec("coba", 0.5, "proportional")
    assert spec.label == "coba:proportional@0.5"


@pytest.mark.parametrize(
    ("label", "message"),
    [
        ("coba:even", "group weight 'even' in 'coba:even' is unknown; use one of proportional, equal"),
        ("bogus:equal", "strategy 'bogus' (in 'bogus:equal') is unknown"),
    ],
)
def test_bad_run_label_names_the_wrong_part(label: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_run_label(label)


def test_uniform_equal_run_repeats_uniform_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    # a scorer with a learning signal for a random model: parity of the response's characters
    parity = lambda texts, answers: np.array([sum(map(ord, t)) % 2 for t in texts], dtype=np.float32)  # noqa: E731
    monkeypatch.setattr(runner, "score_batch", parity)
    seen: list[str] = []
    real = runner.grpo_update
    monkeypatch.setattr(
        runner, "grpo_update", lambda *a, **kw: seen.append(kw["group_weight"]) or real(*a, **kw)
    )
    cfg = LabConfig(
        **TINY, runs=["uniform:proportional", "uniform"], n_train=8, n_eval=8, steps=3, prompts_per_step=4,
        rollouts_per_prompt=4, eval_every=3, eval_samples=1, lr=1e-2,
    )  # fmt: skip
    prompts = [f"{d}+1=" for d in range(8)]
    split = Split(prompts, [str(d + 1) for d in range(8)], np.zeros(8, dtype=np.int64))
    state = new_model(cfg, build_tokenizer(), 0).state_dict()
    ctx = build_context(cfg, 0, split, split, state)
    drop = {"run", "group_weight", "gen_s", "update_s", "plugin_s", "step_s"}
    rows: dict[str, list[dict]] = {}
    for label in cfg.runs:
        rows[label] = []
        runner.train_run(cfg, ctx, parse_run_label(label), rows[label].append)
    assert seen == ["proportional"] * 3 + ["equal"] * 3
    assert [r["group_weight"] for r in rows["uniform"]] == ["equal"] * 3  # the default
    assert any(r["grad_norm"] > 0 for r in rows["uniform"])  # the update had something to do
    strip = [[repr({k: v for k, v in r.items() if k not in drop}) for r in rows[lb]] for lb in cfg.runs]
    assert strip[0] == strip[1]
