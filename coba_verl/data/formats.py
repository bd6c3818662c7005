"""Prompt styles and answer parsing: the text-level contract between a dataset and veRL's scorers.

A prompt style fixes two things that must agree, or a correct model scores 0:

* the instruction the model sees, and
* the answer format the routed veRL scorer extracts (``verl/utils/reward_score``).

=========  ==========================================================  =========================
style      instruction (what the user message ends with)              scorer reads
=========  ==========================================================  =========================
``gsm8k``  ``question + " " + GSM8K_INSTRUCTION``                      ``#### <number>``
``boxed``  ``question + " " + BOXED_INSTRUCTION``                      last ``\\boxed{...}``
``dapo``   ``DAPO_PREFIX + question + DAPO_SUFFIX``                    ``Answer: ...`` line
=========  ==========================================================  =========================

The ``gsm8k`` and ``boxed`` instructions are the ones veRL's own preprocessors append
(``examples/data_preprocess/gsm8k.py`` and ``math_dataset.py``); the ``dapo`` template is the one
DAPO-Math-17K ships inside its prompts, which veRL's ``math_dapo`` scorer expects.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

__all__ = [
    "PromptStyle",
    "AnswerKind",
    "GSM8K_INSTRUCTION",
    "BOXED_INSTRUCTION",
    "DAPO_PREFIX",
    "DAPO_SUFFIX",
    "render_prompt",
    "strip_dapo_template",
    "question_text",
    "parse_answer",
    "gold_response",
]

PromptStyle = Literal["gsm8k", "boxed", "dapo"]
AnswerKind = Literal["gsm8k", "boxed", "plain"]

GSM8K_INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
BOXED_INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."
DAPO_PREFIX = (
    "Solve the following math problem step by step. The last line of your response should be of the "
    "form Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)
DAPO_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'

# veRL's GSM8K preprocessor and strict scorer both read the number after "#### ".
_GSM8K_ANSWER = re.compile(r"#### (\-?[0-9\.\,]+)")
_INTEGER = re.compile(r"[+-]?\d+")


def render_prompt(question: str, style: PromptStyle) -> list[dict[str, str]]:
    """The chat messages of one prompt: a single user turn, ``question`` plus the style's instruction."""
    if style == "gsm8k":
        content = f"{question} {GSM8K_INSTRUCTION}"
    elif style == "boxed":
        content = f"{question} {BOXED_INSTRUCTION}"
    elif style == "dapo":
        content = f"{DAPO_PREFIX}{question}{DAPO_SUFFIX}"
    else:
        raise ValueError(f"style={style!r} is unknown; choose one of 'gsm8k', 'boxed', 'dapo'.")
    return [{"role": "user", "content": content}]


def strip_dapo_template(text: str) -> str:
    """The bare problem of a DAPO-formatted prompt: ``DAPO_PREFIX + q + DAPO_SUFFIX -> q``.

    Either part is removed only where present, so a bare problem passes through unchanged.
    """
    if text.startswith(DAPO_PREFIX):
        text = text[len(DAPO_PREFIX) :]
    if text.endswith(DAPO_SUFFIX):
        text = text[: -len(DAPO_SUFFIX)]
    return text.strip()


def question_text(value: Any) -> str | None:
    """The problem statement held by a source field, or ``None`` when it holds none.

    Accepts a plain string or a chat (a list of ``{"role", "content"}`` messages, as in the
    original DAPO-Math-17K release, whose first user turn is taken). The DAPO template is
    stripped so that every style re-renders the same bare problem.
    """
    if value is None:
        return None
    if isinstance(value, str):
        text = value
    elif isinstance(value, Sequence) and value and all(isinstance(m, Mapping) for m in value):
        users = [m for m in value if m.get("role", "user") == "user"]
        text = str((users or list(value))[0].get("content") or "")
    else:
        return None
    text = strip_dapo_template(text.strip())
    return text or None


def _boxed_content(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` in ``text`` via veRL's own MATH helpers, or ``None``."""
    from verl.utils.reward_score import math_reward  # imports torch: load on first use

    boxed = math_reward.last_boxed_only_string(text)
    if boxed is None:
        return None
    try:
        inner = math_reward.remove_boxed(boxed)
    except AssertionError:  # unbalanced braces: veRL's helper asserts on the shape
        return None
    return inner.strip() or None


def _plain_answer(value: Any) -> str | None:
    """A short final answer as a string.

    ``27.0 -> "27"``, ``"023" -> "23"``, ``["$1$", "2"] -> "1, 2"``, ``"\\boxed{5}" -> "5"``,
    ``"$x^2$" -> "x^2"``.
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, str):
        text = value.strip()
        if "\\boxed" in text or "\\fbox" in text:
            return _boxed_content(text)
        if len(text) >= 2 and text.startswith("$") and text.endswith("$"):
            text = text.strip("$").strip()
        if _INTEGER.fullmatch(text):  # AIME-style "023" -> "23": scorers compare strings
            text = str(int(text))
        return text or None
    if isinstance(value, Sequence):
        parts = [p for p in (_plain_answer(v) for v in value) if p]
        return ", ".join(parts) or None
    return None


def parse_answer(value: Any, kind: AnswerKind) -> str | None:
    """The ground truth held by a source field, or ``None`` when no answer can be parsed.

    ``gsm8k``: the number after ``#### `` in a worked solution, commas removed (as veRL's
    preprocessor does). ``boxed``: the content of the last ``\\boxed{}`` of a worked solution
    (MATH). ``plain``: a short final answer (numbers, strings, lists of answers).
    """
    if kind == "gsm8k":
        if not isinstance(value, str):
            return None
        match = _GSM8K_ANSWER.search(value)
        return match.group(1).replace(",", "") if match else None
    if kind == "boxed":
        return _boxed_content(value) if isinstance(value, str) else None
    if kind == "plain":
        return _plain_answer(value)
    raise ValueError(f"answer kind={kind!r} is unknown; choose one of 'gsm8k', 'boxed', 'plain'.")


def gold_response(ground_truth: str, style: PromptStyle) -> str:
    """A response that states ``ground_truth`` exactly as the style's scorer expects it.

    Scoring it must give 1.0; a row for which it does not is unlearnable (its reward is
    always 0) and is rejected as ``unscorable_answer`` at preparation time.
    """
    if style == "gsm8k":
        return f"Working shown above.\n#### {ground_truth}"
    if style == "boxed":
        return f"Working shown above. The final answer is $\\boxed{{{ground_truth}}}$."
    if style == "dapo":
        return f"Working shown above.\nAnswer: {ground_truth}"
    raise ValueError(f"style={style!r} is unknown; choose one of 'gsm8k', 'boxed', 'dapo'.")
