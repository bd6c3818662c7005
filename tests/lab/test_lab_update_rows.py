"""``update_rows="signal"``: the GRPO update runs only rows with a non-zero advantage, same gradient.

The models here are float64, so that the comparison with ``all`` (other batch shapes, hence other
float rounding) is not blurred by AdamW, which divides each gradient element by its own size:
in float32 a near-zero element's rounding noise moves a weight by up to ~1e-6, in float64 by ~1e-14.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import asdict

import numpy as np
import pytest
import torch
from verl.trainer.ppo import core_algos

from coba_verl.arithmetic.model import ModelSpec, build_model
from coba_verl.arithmetic.task import Split
from coba_verl.arithmetic.tokenizer import BOS, EOS, PAD, build_tokenizer, encode_prompts
from coba_verl.arithmetic.warmstart import encode_answers
from coba_verl.lab import grpo, runner, seeds
from coba_verl.lab.cli import build_parser, config_from_args, main
from coba_verl.lab.config import LabConfig, RunSpec
from coba_verl.lab.grpo import RolloutBatch, grpo_update, make_actor_config
from coba_verl.lab.scenarios import SCENARIOS
from coba_verl.refusal import CobaRefusal

TINY = {"hidden_size": 32, "num_layers": 1, "intermediate_size": 64, "warm_steps": 0}
N = 4  # rollouts per group; 3 groups = 12 rows per mini-batch
ATOL = 1e-9  # all vs signal differ by ~1e-14 here; a wrong denominator by ~1e-3 (see below)

#: (scores of the group's rollouts, long prompt and responses). Groups whose scores are all equal
#: have advantage 0; they get the long prompts and responses, so cutting them also cuts columns.
MIXED = [([1] * N, True), ([1, 0, 0, 1], False), ([0] * N, True)] + [
    ([0, 1, 0, 0], False), ([0] * N, True), ([1, 1, 0, 1], False),
]  # fmt: skip
EQUAL = [([1] * N, True), ([0] * N, False), ([0] * N, True)]
SOME = [([0, 1, 1, 0], False), ([1] * N, True), ([1, 0, 0, 0], True)]


def _batch(groups: list[tuple[list[int], bool]], seed: int = 0) -> RolloutBatch:
    """One row per rollout, groups in order; random digit strings as responses."""
    tok = build_tokenizer()
    rng = np.random.default_rng(seed)
    prompts, answers, scores, index = [], [], [], []
    for g, (group_scores, long) in enumerate(groups):
        for s in group_scores:
            prompts.append("123+456=" if long else f"{g}+1=")
            size = rng.integers(6, 10) if long else rng.integers(1, 4)
            answers.append("".join(rng.choice(list("0123456789"), size=size)))
            scores.append(s)
            index.append(g)
    p_ids, p_mask = encode_prompts(tok, prompts)
    r_ids, r_mask = encode_answers(tok, answers)
    return RolloutBatch(p_ids, p_mask, r_ids, r_mask, np.array(scores, np.float32), np.array(index))


def _model() -> torch.nn.Module:
    tok = build_tokenizer()
    spec = ModelSpec(hidden_size=32, num_layers=2, intermediate_size=64, max_positions=64)
    ids = {"pad_id": tok.token_to_id(PAD), "bos_id": tok.token_to_id(BOS), "eos_id": tok.token_to_id(EOS)}
    return build_model(spec, tok.get_vocab_size(), **ids, seed=0).double()


def _update(model, batch: RolloutBatch, rows: str, optim: str = "adamw") -> tuple[list, dict, dict]:
    """A copy of ``model`` after one `grpo_update` in 2 mini-batches: (parameters, metrics, the
    actor's global_batch_info afterwards)."""
    model = copy.deepcopy(model)
    if optim == "adamw":  # weight decay large enough to see
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    else:  # plain SGD: the parameters move by exactly -lr * gradient
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
    actor = make_actor_config(  # a tight clip, so that the second mini-batch's ratios get clipped
        rollout_n=N, mini_batch_size=len(batch.scores) // 2, clip_ratio_low=0.01, clip_ratio_high=0.01
    )
    metrics = grpo_update(model, opt, batch, actor, rows=rows, grad_clip=1e9 if optim == "sgd" else 1.0)
    return [p.detach().clone() for p in model.parameters()], metrics, dict(actor.global_batch_info)


def _max_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("optim", ["adamw", "sgd"])
def test_signal_rows_give_the_parameters_and_metrics_of_all_rows(optim: str) -> None:
    model, batch = _model(), _batch(MIXED)
    before = [p.detach().clone() for p in model.parameters()]
    p_all, m_all, _ = _update(model, batch, "all", optim)
    p_sig, m_sig, info = _update(model, batch, "signal", optim)
    assert _max_diff(p_all, before) > 1e-4  # the update moved the model
    assert _max_diff(p_all, p_sig) < ATOL
    assert info == {}  # the normaliser handed to veRL's agg_loss does not stay on the actor config
    assert m_all["actor/pg_clipfrac"] > 0  # later mini-batch clipped: the rescaled fraction is tested
    for key in ("actor/pg_loss", "actor/grad_norm", "actor/pg_clipfrac", "actor/pg_clipfrac_lower"):
        assert m_sig[key] == pytest.approx(m_all[key], rel=1e-6, abs=1e-12), key
    assert set(m_sig) == set(m_all)


def test_a_denominator_of_the_signal_tokens_only_would_fail_the_comparison(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The mutation check for the test above: without the whole mini-batch's token count veRL's
    agg_loss divides by the signal rows' tokens, and the parameters leave the tolerance far behind."""
    model, batch = _model(), _batch(MIXED)
    p_all, m_all, _ = _update(model, batch, "all")
    monkeypatch.setattr(grpo, "_normalised_by", lambda actor, **kw: contextlib.nullcontext())
    monkeypatch.setattr(grpo, "check_normalisers_reach_the_loss", lambda loss_fn, actor: None)  # its gate
    p_bad, m_bad, _ = _update(model, batch, "signal")
    assert _max_diff(p_all, p_bad) > 1e3 * ATOL
    assert m_bad["actor/pg_loss"] != pytest.approx(m_all["actor/pg_loss"], rel=1e-2)


def test_signal_rows_forward_only_the_rows_with_advantage_and_cut_padding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shapes: list[tuple[int, int, int]] = []
    real = grpo.response_logprobs

    def spy(model, prompt_ids, prompt_mask, response_ids, response_mask):
        shapes.append((prompt_ids.shape[0], prompt_ids.shape[1], response_ids.shape[1]))
        return real(model, prompt_ids, prompt_mask, response_ids, response_mask)

    monkeypatch.setattr(grpo, "response_logprobs", spy)
    batch = _batch(MIXED)
    _update(_model(), batch, "signal")
    short_p = encode_prompts(build_tokenizer(), ["0+1="])[0].shape[1]
    signal = torch.as_tensor(np.repeat([not long for _, long in MIXED], N))  # (R,) the mixed groups' rows
    short_t = int(batch.response_mask[signal].sum(1).max())
    # the old log-probs of the 12 signal rows, then 4 + 8 of them in the two mini-batches
    assert [s[0] for s in shapes] == [12, 4, 8]
    assert shapes[0] == (12, short_p, short_t)
    assert all(p == short_p and t <= short_t for _, p, t in shapes)
    assert batch.prompt_ids.shape[1] > short_p and batch.response_ids.shape[1] > short_t


@pytest.mark.parametrize("groups", [EQUAL + SOME, SOME + EQUAL], ids=["empty_first", "empty_last"])
def test_a_mini_batch_without_signal_still_steps_the_optimiser_like_all(groups) -> None:
    """Its gradient under ``all`` is exactly 0, and AdamW still decays the weights, follows its
    momentum and counts the step; a gradient left at None would skip all three."""
    model, batch = _model(), _batch(groups)
    p_all, m_all, _ = _update(model, batch, "all")
    p_sig, m_sig, _ = _update(model, batch, "signal")
    assert _max_diff(p_all, p_sig) < ATOL
    assert m_sig["actor/grad_norm"] == pytest.approx(m_all["actor/grad_norm"], rel=1e-6)
    assert m_sig["actor/pg_loss"] == pytest.approx(m_all["actor/pg_loss"], rel=1e-6)


def test_a_batch_without_signal_only_decays_the_weights() -> None:
    model, batch = _model(), _batch(EQUAL + EQUAL)
    p_all, _, _ = _update(model, batch, "all")
    p_sig, m_sig, _ = _update(model, batch, "signal")
    assert _max_diff(p_all, p_sig) == 0.0
    assert _max_diff(p_sig, [p.detach() for p in model.parameters()]) > 0  # weight decay
    assert m_sig["actor/grad_norm"] == 0.0 and np.isnan(m_sig["actor/ppo_kl"])


def test_signal_is_refused_where_veRLs_loss_ignores_the_normaliser(monkeypatch: pytest.MonkeyPatch) -> None:
    """The gate of the lean on veRL: an ``agg_loss`` that drops ``global_batch_info`` (a veRL that
    changed) would divide by the signal tokens alone; ``signal`` refuses, ``all`` still runs."""
    model, batch = _model(), _batch(MIXED)
    actor = make_actor_config(rollout_n=N, mini_batch_size=12, clip_ratio_low=0.2, clip_ratio_high=0.28)
    loss_fn = core_algos.get_policy_loss_fn("vanilla")
    grpo.check_normalisers_reach_the_loss(loss_fn, actor)  # veRL 0.9.1's hands it on
    real = core_algos.agg_loss
    monkeypatch.setattr(core_algos, "agg_loss", lambda loss_mat, loss_mask, loss_agg_mode, **_: real(
        loss_mat, loss_mask, loss_agg_mode))  # fmt: skip
    opt = torch.optim.AdamW(model.parameters())
    with pytest.raises(CobaRefusal, match="does not divide by ActorConfig.global_batch_info"):
        grpo_update(model, opt, batch, actor, rows="signal")
    assert actor.global_batch_info == {}
    grpo_update(model, opt, batch, actor, rows="all")


def test_rows_other_than_all_or_signal_and_signal_with_another_loss_are_refused() -> None:
    model, batch = _model(), _batch(MIXED)
    opt = torch.optim.AdamW(model.parameters())
    actor = make_actor_config(rollout_n=N, mini_batch_size=12, clip_ratio_low=0.2, clip_ratio_high=0.28)
    with pytest.raises(CobaRefusal, match="rows='some' is unknown; use one of all, signal"):
        grpo_update(model, opt, batch, actor, rows="some")
    gspo = make_actor_config(
        rollout_n=N, mini_batch_size=12, clip_ratio_low=0.2, clip_ratio_high=0.28, loss_mode="gspo"
    )
    with pytest.raises(CobaRefusal, match="loss_mode='gspo'"):
        grpo_update(model, opt, batch, gspo, rows="signal")


def test_update_rows_defaults_to_all_and_a_bad_value_is_named(capsys) -> None:
    assert all(LabConfig.from_scenario(name).update_rows == "all" for name in SCENARIOS)
    with pytest.raises(CobaRefusal, match="update_rows='some' is unknown; use one of all, signal"):
        LabConfig(update_rows="some")
    old = {k: v for k, v in asdict(LabConfig()).items() if k != "update_rows"}  # a config.json before it
    assert LabConfig(**old).update_rows == "all"
    assert config_from_args(build_parser().parse_args(["--update-rows", "signal"])).update_rows == "signal"
    with pytest.raises(SystemExit) as exc:
        main(["--update-rows", "some"])
    assert exc.value.code == 2
    assert "invalid choice: 'some'" in capsys.readouterr().err


def test_update_rows_leaves_the_warm_start_cache_key_alone() -> None:
    """Cached warm starts (keyed by the fields that make them) stay valid whatever ``update_rows``."""
    assert seeds._cache_key(LabConfig(), 0) == seeds._cache_key(LabConfig(update_rows="signal"), 0)


def test_the_runner_hands_update_rows_to_the_update(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    real = runner.grpo_update

    def spy(*args, **kw):
        seen.append(kw["rows"])
        return real(*args, **kw)

    monkeypatch.setattr(runner, "grpo_update", spy)
    cfg = LabConfig(
        **TINY, runs=["uniform"], n_train=4, n_eval=4, steps=2, prompts_per_step=4, rollouts_per_prompt=4,
        eval_every=2, eval_samples=1, updates_per_step=2, update_rows="signal",
    )  # fmt: skip
    train = Split([f"{d}+1=" for d in range(4)], [str(d + 1) for d in range(4)], np.zeros(4, dtype=np.int64))
    tok = build_tokenizer()
    ctx = seeds.build_context(cfg, 0, train, train, seeds.new_model(cfg, tok, 0).state_dict())
    rows: list[dict] = []
    runner.train_run(cfg, ctx, RunSpec("uniform"), rows.append)
    assert seen == ["signal", "signal"] and len(rows) == 2
