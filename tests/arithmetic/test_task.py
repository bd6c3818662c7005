"""The generated arithmetic task: correct answers, stable ids, a held-out split, determinism."""

from __future__ import annotations

import numpy as np
import pytest

from coba_verl.arithmetic.task import LEVELS, make_splits, sample_problems, score_batch, verify


def _evaluate(prompt: str) -> int:
    body = prompt.removesuffix("=")
    for op in "+-*":
        if op in body:
            a, b = body.split(op)
            return {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]
    raise AssertionError(f"no operator in {prompt!r}")


def test_answers_are_the_exact_results_of_the_prompts() -> None:
    train, held_out = make_splits(3, 500, 200)
    for split in (train, held_out):
        for p, a in zip(split.prompts, split.answers, strict=True):
            assert p.endswith("=")
            assert int(a) == _evaluate(p)
            assert a == str(int(a))  # canonical form, no leading zeros or "+"


def test_operands_have_the_digits_their_level_names() -> None:
    rng = np.random.default_rng(0)
    prompts, _, levels = sample_problems(rng, 400)
    for p, k in zip(prompts, levels.tolist(), strict=True):
        lv = LEVELS[k]
        a, b = p[:-1].split(lv.op)
        assert (len(a), len(b)) == (lv.a_digits, lv.b_digits), p


def test_every_level_appears_with_its_weight() -> None:
    rng = np.random.default_rng(1)
    _, _, levels = sample_problems(rng, 20_000)
    weights = np.array([lv.weight for lv in LEVELS])
    observed = np.bincount(levels, minlength=len(LEVELS)) / levels.size
    np.testing.assert_allclose(observed, weights / weights.sum(), atol=0.015)


def test_same_seed_gives_the_same_splits_and_another_seed_does_not() -> None:
    a_train, a_eval = make_splits(7, 300, 100)
    b_train, b_eval = make_splits(7, 300, 100)
    c_train, _ = make_splits(8, 300, 100)
    assert a_train.prompts == b_train.prompts and a_eval.prompts == b_eval.prompts
    np.testing.assert_array_equal(a_train.levels, b_train.levels)
    assert a_train.prompts != c_train.prompts


def test_ids_are_stable_row_indices() -> None:
    train, _ = make_splits(0, 123, 10)
    np.testing.assert_array_equal(train.ids, np.arange(123))
    assert train.ids.dtype == np.int64 and len(train) == 123


def test_held_out_prompts_never_occur_in_the_training_set() -> None:
    train, held_out = make_splits(0, 2048, 512)
    assert len(held_out) == 512
    assert not set(held_out.prompts) & set(train.prompts)
    assert len(set(held_out.prompts)) == 512


def test_verify_accepts_only_the_exact_answer() -> None:
    assert verify("42", "42") == 1.0
    assert verify(" 42 ", "42") == 1.0
    for wrong in ("", "4", "420", "042", "-42", "4 2", "42="):
        assert verify(wrong, "42") == 0.0, wrong
    assert verify("-7", "-7") == 1.0


def test_score_batch_aligns_and_rejects_length_mismatch() -> None:
    np.testing.assert_array_equal(score_batch(["1", "2", "3"], ["1", "0", "3"]), [1.0, 0.0, 1.0])
    with pytest.raises(ValueError, match="2 responses but 3 answers"):
        score_batch(["1", "2"], ["1", "2", "3"])


@pytest.mark.parametrize(("n_train", "n_eval"), [(0, 5), (5, 0)])
def test_make_splits_rejects_empty_sizes(n_train: int, n_eval: int) -> None:
    with pytest.raises(ValueError, match=f"n_train={n_train} and n_eval={n_eval}"):
        make_splits(0, n_train, n_eval)
