"""The worked-multiplication levels: answers written as repeated addition, longer when harder."""

from __future__ import annotations

import numpy as np
import pytest

from coba_verl.arithmetic.task import parse_levels, sample_problems, verify, worked_answer


def test_worked_answer_writes_each_partial_sum() -> None:
    assert worked_answer(47, 3) == "47+47=94+47=141"
    assert worked_answer(47, 1) == "47"
    assert worked_answer(12, 4).rsplit("=", 1)[-1] == "48"


def test_worked_answers_grow_with_the_multiplier_from_about_10_to_60_characters() -> None:
    levels = parse_levels({f"2x{b}": 1.0 for b in range(2, 10)})
    prompts, answers, lv = sample_problems(np.random.default_rng(0), 4000, levels)
    means = [
        np.mean([len(a) for a, k in zip(answers, lv, strict=True) if k == i]) for i in range(len(levels))
    ]
    assert all(x < y for x, y in zip(means, means[1:], strict=False)), means  # harder -> longer
    assert 8 <= min(len(a) for a in answers) and max(len(a) for a in answers) <= 60
    assert means[0] < 10 and means[-1] > 50
    for p, a in zip(prompts[:50], answers[:50], strict=True):  # "47*6=" -> ...=282
        x, b = p[:-1].split("*")
        assert int(a.rsplit("=", 1)[-1]) == int(x) * int(b)


def test_a_worked_answer_is_scored_on_its_final_number() -> None:
    assert verify("47+47=94+47=141", "47+47=94+47=141") == 1.0
    assert verify("141", "47+47=94+47=141") == 1.0  # working left out: still the right answer
    assert verify("47+47=94+47=142", "47+47=94+47=141") == 0.0
    assert verify("47+47=94", "47+47=94+47=141") == 0.0  # stopped early
    assert verify("376", "376") == 1.0 and verify("3760", "376") == 0.0  # plain answers as before


def test_worked_and_plain_levels_asking_the_same_prompts_are_refused() -> None:
    with pytest.raises(ValueError, match=r"levels '2x6' and '2\*1' ask the same prompts"):
        parse_levels({"2*1": 1.0, "2x6": 1.0})
