"""The lab's exact pass rates against the sampler they describe (`coba_verl.lab.exact_rates`)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from coba_verl.arithmetic.outcomes import sample_scores
from coba_verl.arithmetic.tokenizer import EOS, PAD
from coba_verl.lab.config import LabConfig
from coba_verl.lab.evaluation import sampling_generator
from coba_verl.lab.exact_rates import exact_pass_rates
from coba_verl.lab.seeds import SeedContext, new_model, prepare_seed
from coba_verl.refusal import CobaRefusal

#: Prompts and samples of the sampling check: 24 x 2,000 rollouts (about 5 s on one core).
PROMPTS, SAMPLES = 24, 2000
#: Family-wise error of the binomial check over the prompts (Bonferroni).
ALPHA = 1e-3


@pytest.fixture(scope="module")
def warm() -> tuple[LabConfig, SeedContext, torch.nn.Module]:
    """`paper`'s warm start on a small split (pass rates spread over (0, 1)), one torch thread."""
    torch.set_num_threads(1)
    cfg = LabConfig.from_scenario("paper", runs=["uniform"], seeds=[0], n_train=64, n_eval=16)
    ctx = prepare_seed(cfg, 0, cache_dir=None)
    model = new_model(cfg, ctx.tok, 0)
    model.load_state_dict(ctx.warm_state)
    return cfg, ctx, model.eval()


def _exact(model, ctx, ids):
    return exact_pass_rates(
        model, ctx.tok, ctx.train_ids[ids], ctx.train_mask[ids], [ctx.train.answers[i] for i in ids],
        max_new_tokens=ctx.max_new_tokens,
    )  # fmt: skip


def _sampled_counts(model, ctx, ids, seed: int) -> np.ndarray:
    rows, scores = sample_scores(
        model, ctx.tok, ctx.train_ids[ids], ctx.train_mask[ids], [ctx.train.answers[i] for i in ids],
        SAMPLES, sampling_generator(model, seed), max_new_tokens=ctx.max_new_tokens, chunk=PROMPTS * SAMPLES,
    )  # fmt: skip
    return np.bincount(rows, weights=scores, minlength=ids.size).astype(np.int64)


def _outside_binomial(counts: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Prompts whose count is implausible for every rate in [low, high] (two-sided, Bonferroni)."""
    cut = ALPHA / (2 * counts.size)
    too_many = stats.binom.sf(counts - 1, SAMPLES, np.minimum(high, 1.0)) < cut  # P(X >= c | high)
    too_few = stats.binom.cdf(counts, SAMPLES, low) < cut  # P(X <= c | low)
    return too_many | too_few


def test_exact_pass_rates_match_thousands_of_samples_within_binomial_bounds(warm) -> None:
    _, ctx, model = warm
    ids = np.arange(PROMPTS)
    exact = _exact(model, ctx, ids)
    counts = _sampled_counts(model, ctx, ids, seed=11)
    assert 0.05 < exact.p.mean() < 0.95 and np.ptp(exact.p) > 0.5  # a spread of rates, not all 0 or 1
    assert exact.bound.max() < 0.01  # the warm start almost never emits <pad> or <bos>
    assert not _outside_binomial(counts, exact.p, exact.p + exact.bound).any()


def test_the_sampling_check_rejects_the_rates_of_another_temperature(warm) -> None:
    """The check above can fail: the exact rates at temperature 0.8 are not the sampler's (1.0)."""
    _, ctx, model = warm
    ids = np.arange(PROMPTS)
    counts = _sampled_counts(model, ctx, ids, seed=11)
    cooler = exact_pass_rates(
        model, ctx.tok, ctx.train_ids[ids], ctx.train_mask[ids], [ctx.train.answers[i] for i in ids],
        max_new_tokens=ctx.max_new_tokens, temperature=0.8,
    )  # fmt: skip
    assert _outside_binomial(counts, cooler.p, cooler.p + cooler.bound).any()


def test_paths_through_dropped_tokens_are_bounded_when_the_model_emits_them(warm) -> None:
    """With <pad> as likely as <eos> everywhere, sampling passes more often than the main path, and
    never more than the bound allows."""
    cfg, ctx, model = warm
    leaky = new_model(cfg, ctx.tok, 0)
    leaky.load_state_dict(model.state_dict())
    leaky.eval()
    with torch.no_grad():  # tied embeddings: the output row of <pad> becomes <eos>'s
        emb = leaky.get_output_embeddings().weight
        emb[ctx.tok.token_to_id(PAD)] = emb[ctx.tok.token_to_id(EOS)]
    ids = np.arange(PROMPTS)
    exact = _exact(leaky, ctx, ids)
    counts = _sampled_counts(leaky, ctx, ids, seed=12)
    assert exact.bound.max() > 0.05
    assert _outside_binomial(counts, exact.p, exact.p).any()  # the main path alone is too low
    assert not _outside_binomial(counts, exact.p, exact.p + exact.bound).any()


def test_worked_answers_are_refused_by_name(warm) -> None:
    _, ctx, model = warm
    with pytest.raises(CobaRefusal, match=r"'47\+47=94' are worked"):
        exact_pass_rates(
            model, ctx.tok, ctx.train_ids[:1], ctx.train_mask[:1], ["47+47=94"], max_new_tokens=12
        )


def test_an_answer_as_long_as_the_cap_counts_its_cut_path_and_a_longer_one_never_passes(warm) -> None:
    _, ctx, model = warm
    answer = ctx.train.answers[0]
    length = len(answer)
    at_cap = exact_pass_rates(
        model, ctx.tok, ctx.train_ids[:1], ctx.train_mask[:1], [answer], max_new_tokens=length
    )
    below = exact_pass_rates(
        model, ctx.tok, ctx.train_ids[:1], ctx.train_mask[:1], [answer], max_new_tokens=length + 1
    )
    over = exact_pass_rates(
        model, ctx.tok, ctx.train_ids[:1], ctx.train_mask[:1], [answer], max_new_tokens=length - 1
    )
    # the cut path drops the <eos> factor: at the cap, p = pi(answer) >= pi(answer, <eos>)
    assert at_cap.p[0] >= below.p[0] and at_cap.bound[0] == 0.0
    assert over.p[0] == 0.0 and over.bound[0] == 0.0
