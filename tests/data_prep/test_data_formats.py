"""Prompt styles, answer parsing and scorer routing, checked against veRL's own scorers."""

from __future__ import annotations

import pytest
from verl.utils.reward_score import default_compute_score

from coba_verl.data import SOURCES
from coba_verl.data.formats import (
    DAPO_PREFIX,
    DAPO_SUFFIX,
    gold_response,
    parse_answer,
    question_text,
    render_prompt,
)
from coba_verl.data.reward import DAPO_EVAL_SOURCES, compute_score, score_value


def test_instruction_suffixes_are_verl_preprocessor_text() -> None:
    # examples/data_preprocess/gsm8k.py and math_dataset.py append these after one space.
    gsm8k = render_prompt("Q?", "gsm8k")[0]["content"]
    boxed = render_prompt("Q?", "boxed")[0]["content"]
    assert gsm8k == 'Q? Let\'s think step by step and output the final answer after "####".'
    assert boxed == "Q? Let's think step by step and output the final answer within \\boxed{}."


def test_dapo_prompt_is_the_dapo_math_17k_template_and_strips_back() -> None:
    message = render_prompt("Find $x$.", "dapo")
    assert message == [{"role": "user", "content": DAPO_PREFIX + "Find $x$." + DAPO_SUFFIX}]
    assert DAPO_SUFFIX == '\n\nRemember to put your answer on its own line after "Answer:".'
    assert question_text(message) == "Find $x$."
    assert question_text("Find $x$.") == "Find $x$."  # a bare problem passes through


@pytest.mark.parametrize(
    ("value", "kind", "expected"),
    [
        ("so 4*12=48\n#### 48", "gsm8k", "48"),
        ("#### 1,250", "gsm8k", "1250"),
        ("#### -3", "gsm8k", "-3"),
        ("three plus four is seven", "gsm8k", None),
        ("thus $\\boxed{\\frac{\\sqrt{3}}{2}}$.", "boxed", "\\frac{\\sqrt{3}}{2}"),
        ("first \\boxed{1} then \\boxed{2}", "boxed", "2"),
        ("$x = 9$", "boxed", None),
        ("\\boxed{\\frac{1}{2}", "boxed", None),  # unbalanced braces
        (27.0, "plain", "27"),
        (2.5, "plain", "2.5"),
        (51, "plain", "51"),
        ("023", "plain", "23"),
        (" 720 ", "plain", "720"),
        ("$\\frac{1}{2}$", "plain", "\\frac{1}{2}"),
        (["$-2$", "$2$"], "plain", "-2, 2"),
        ("\\boxed{5}", "plain", "5"),
        ("", "plain", None),
        (None, "plain", None),
        (True, "plain", None),
        (float("nan"), "plain", None),
    ],
)
def test_parse_answer(value: object, kind: str, expected: str | None) -> None:
    assert parse_answer(value, kind) == expected


@pytest.mark.parametrize(
    ("data_source", "style", "truth"),
    [
        ("openai/gsm8k", "gsm8k", "1250"),
        ("DigitalLearningGmbH/MATH-lighteval", "boxed", "\\frac{1}{2}"),
        ("HuggingFaceH4/MATH-500", "boxed", "(-1, 1)"),
        ("math_dapo", "dapo", "720"),
        ("aime2024", "dapo", "23"),
        ("aime2025", "dapo", "51"),
    ],
)
def test_canonical_names_score_gold_one_and_wrong_below_one_in_verl(data_source, style, truth) -> None:
    right = default_compute_score(data_source, gold_response(truth, style), truth)
    wrong = default_compute_score(data_source, gold_response("98765", style), truth)
    assert score_value(right) == 1.0
    assert score_value(wrong) < 1.0


def test_plain_math_name_routes_to_dapo_scorer_not_the_boxed_one() -> None:
    # The pitfall the issue names: "math" is DAPO's Answer-line scorer (+1/-1 dicts).
    dapo_style = default_compute_score("math", "Answer: 7", "7")
    assert isinstance(dapo_style, dict) and dapo_style["score"] == 1.0
    boxed_scorer = default_compute_score("DigitalLearningGmbH/MATH-lighteval", "Answer: 7", "7")
    assert boxed_scorer == 0.0


@pytest.mark.parametrize("data_source", sorted(DAPO_EVAL_SOURCES))
def test_eval_names_unknown_to_verl_route_to_math_dapo(data_source: str) -> None:
    with pytest.raises(NotImplementedError):
        default_compute_score(data_source, "Answer: 5", "5")
    assert compute_score(data_source, "Answer: 5", "5") == {"score": 1.0, "acc": True, "pred": "5"}
    assert score_value(compute_score(data_source, "Answer: 6", "5")) == -1.0


def test_router_leaves_verl_names_to_default_compute_score() -> None:
    for text, truth in (("#### 7", "7"), ("#### 8", "7")):
        assert compute_score("openai/gsm8k", text, truth) == default_compute_score(
            "openai/gsm8k", text, truth
        )


def test_every_source_pairs_its_data_source_with_a_scorer_for_its_style() -> None:
    for spec in SOURCES.values():
        result = compute_score(spec.data_source, gold_response("42", spec.style), "42")
        assert score_value(result) == 1.0, spec.name
        if spec.style == "dapo":  # the instruction asks for an Answer line: the DAPO scorer must read it
            assert isinstance(result, dict), spec.name
