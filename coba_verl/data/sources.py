"""The datasets ``python -m coba_verl.data`` knows: where each comes from and how it is written.

Every ``data_source`` below was checked against veRL 0.9.1's
``verl.utils.reward_score.default_compute_score``:

==================================  =============================  ==============================
data_source                         veRL scorer                    used by
==================================  =============================  ==============================
``openai/gsm8k``                    ``gsm8k`` (``#### n``, 0/1)    gsm8k
``DigitalLearningGmbH/MATH-lighteval``  ``math_reward`` (boxed, 0/1)   math
``HuggingFaceH4/MATH-500``          ``math_reward`` (boxed, 0/1)   math500
``math_dapo``                       ``math_dapo`` (+1/-1)          dapo_math
``aime2024``, ``aime2025``          ``math_dapo`` (prefix aime)    aime2024, aime2025
``amc23``, ``math500_dapo``,        ``math_dapo`` via              amc23, math500_dapo,
``minerva``, ``olympiadbench``      :mod:`coba_verl.data.reward`   minerva, olympiadbench
==================================  =============================  ==============================

Pitfall: the plain name ``"math"`` routes to the DAPO scorer (``Answer:`` line, +1/-1), not to the
boxed MATH scorer; MATH data therefore keeps veRL's canonical hub names.

Hub ids and fields of the evaluation sets follow the copies most veRL users load; a mirror with
other column names works with ``--hub-id`` plus ``--question-field`` / ``--answer-field``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from coba_verl.data.formats import AnswerKind, PromptStyle
from coba_verl.refusal import CobaRefusal

__all__ = ["SourceSpec", "SOURCES", "GROUPS", "PAPER_EVAL", "resolve"]


@dataclass(frozen=True)
class SourceSpec:
    """One dataset: its origin, the columns read, and the prompt style written.

    Args:
        name: CLI name, e.g. ``gsm8k``.
        description: One line for ``--help`` and the docs.
        hub_id: Hugging Face dataset id read by ``datasets.load_dataset``.
        hub_config: Its config name, or ``None``.
        splits: Output split -> hub split, e.g. ``{"train": "train", "test": "test"}``.
        data_source: Written to every row; selects the veRL scorer (table above).
        style: Prompt style (:mod:`coba_verl.data.formats`); must match the scorer.
        question_fields: Candidate columns for the problem, first present and non-empty wins.
            A dotted name reads a nested field.
        answer_fields: Candidate ``(column, kind)`` pairs for the ground truth, tried in order.
        context_fields: Columns prepended to the question when non-empty (OlympiadBench).
        solution_fields: Columns whose text is kept in ``extra_info.solution`` for reference
            (a list of strings, as in OlympiadBench, is joined).
        id_fields: Columns whose value is kept in ``extra_info.source_id`` (else the row position).
        dedupe: Drop repeated problems (DAPO-Math-17K repeats each problem about 100 times).
        training: Whether the set is used for training (its ``extra_info.index`` keys the
            CoBA-RL tracker, so it must be unique across the training set).
        ability: Written to every row's ``ability`` column.
    """

    name: str
    description: str
    hub_id: str
    hub_config: str | None
    splits: Mapping[str, str]
    data_source: str
    style: PromptStyle
    question_fields: tuple[str, ...]
    answer_fields: tuple[tuple[str, AnswerKind], ...]
    context_fields: tuple[str, ...] = ()
    solution_fields: tuple[str, ...] = ()
    id_fields: tuple[str, ...] = ()
    dedupe: bool = False
    training: bool = False
    ability: str = "math"


_QUESTION = ("problem", "question", "prompt", "Problem", "Question")

SOURCES: dict[str, SourceSpec] = {
    spec.name: spec
    for spec in (
        SourceSpec(
            name="gsm8k",
            description="GSM8K grade-school math (openai/gsm8k, config main), veRL's GSM8K format.",
            hub_id="openai/gsm8k",
            hub_config="main",
            splits={"train": "train", "test": "test"},
            data_source="openai/gsm8k",
            style="gsm8k",
            question_fields=("question",),
            answer_fields=(("answer", "gsm8k"),),
            solution_fields=("answer",),
            training=True,
        ),
        SourceSpec(
            name="math",
            description="MATH (DigitalLearningGmbH/MATH-lighteval), veRL's boxed format.",
            hub_id="DigitalLearningGmbH/MATH-lighteval",
            hub_config=None,
            splits={"train": "train", "test": "test"},
            data_source="DigitalLearningGmbH/MATH-lighteval",
            style="boxed",
            question_fields=("problem",),
            answer_fields=(("solution", "boxed"),),
            solution_fields=("solution",),
            training=True,
        ),
        SourceSpec(
            name="math500",
            description="MATH-500 (HuggingFaceH4/MATH-500), boxed format; the math recipe's validation.",
            hub_id="HuggingFaceH4/MATH-500",
            hub_config=None,
            splits={"test": "test"},
            data_source="HuggingFaceH4/MATH-500",
            style="boxed",
            question_fields=("problem",),
            answer_fields=(("answer", "plain"), ("solution", "boxed")),
            solution_fields=("solution",),
            id_fields=("unique_id",),
        ),
        SourceSpec(
            name="dapo_math",
            description="DAPO-Math-17K (BytedTsinghua-SIA/DAPO-Math-17k), de-duplicated, DAPO format.",
            hub_id="BytedTsinghua-SIA/DAPO-Math-17k",
            hub_config=None,
            splits={"train": "train"},
            data_source="math_dapo",
            style="dapo",
            question_fields=("prompt", "problem", "question"),
            answer_fields=(
                ("reward_model.ground_truth", "plain"),  # BytedTsinghua-SIA release: chat prompt + gt
                ("solution", "plain"),  # open-r1/DAPO-Math-17k-Processed: bare problem + answer
                ("answer", "plain"),
            ),
            id_fields=("extra_info.index",),
            dedupe=True,
            training=True,
        ),
        SourceSpec(
            name="aime2024",
            description="AIME 2024 (HuggingFaceH4/aime_2024), DAPO format.",
            hub_id="HuggingFaceH4/aime_2024",
            hub_config=None,
            splits={"test": "train"},
            data_source="aime2024",
            style="dapo",
            question_fields=_QUESTION,
            answer_fields=(("answer", "plain"), ("solution", "boxed")),
            id_fields=("id",),
        ),
        SourceSpec(
            name="aime2025",
            description="AIME 2025 (MathArena/aime_2025), DAPO format.",
            hub_id="MathArena/aime_2025",
            hub_config=None,
            splits={"test": "train"},
            data_source="aime2025",
            style="dapo",
            question_fields=_QUESTION,
            answer_fields=(("answer", "plain"), ("solution", "boxed")),
            id_fields=("problem_idx", "id"),
        ),
        SourceSpec(
            name="amc23",
            description="AMC 2023 (math-ai/amc23), DAPO format.",
            hub_id="math-ai/amc23",
            hub_config=None,
            splits={"test": "test"},
            data_source="amc23",
            style="dapo",
            question_fields=_QUESTION,
            answer_fields=(("answer", "plain"),),
            id_fields=("id",),
        ),
        SourceSpec(
            name="math500_dapo",
            description="MATH-500 (HuggingFaceH4/MATH-500) in DAPO format, for DAPO-trained models.",
            hub_id="HuggingFaceH4/MATH-500",
            hub_config=None,
            splits={"test": "test"},
            data_source="math500_dapo",
            style="dapo",
            question_fields=("problem",),
            answer_fields=(("answer", "plain"), ("solution", "boxed")),
            id_fields=("unique_id",),
        ),
        SourceSpec(
            name="minerva",
            description="Minerva math (math-ai/minervamath), DAPO format.",
            hub_id="math-ai/minervamath",
            hub_config=None,
            splits={"test": "test"},
            data_source="minerva",
            style="dapo",
            question_fields=_QUESTION,
            answer_fields=(("answer", "plain"),),
        ),
        SourceSpec(
            name="olympiadbench",
            description="OlympiadBench, English text-only maths (Hothan/OlympiadBench), DAPO format.",
            hub_id="Hothan/OlympiadBench",
            hub_config="OE_TO_maths_en_COMP",
            splits={"test": "train"},
            data_source="olympiadbench",
            style="dapo",
            question_fields=_QUESTION,
            answer_fields=(("final_answer", "plain"), ("answer", "plain")),
            context_fields=("context",),
            solution_fields=("solution",),
            id_fields=("id",),
        ),
    )
}

# The paper's evaluation sets: the five it averages, plus Minerva (in the authors' launch script).
PAPER_EVAL: tuple[str, ...] = ("aime2024", "aime2025", "amc23", "math500_dapo", "olympiadbench")
GROUPS: dict[str, tuple[str, ...]] = {
    "dapo_eval": (*PAPER_EVAL, "minerva"),
    "paper": ("dapo_math", *PAPER_EVAL, "minerva"),
}


def resolve(name: str) -> tuple[SourceSpec, ...]:
    """The specs a CLI name stands for: one dataset, or every member of a group."""
    if name in SOURCES:
        return (SOURCES[name],)
    if name in GROUPS:
        return tuple(SOURCES[m] for m in GROUPS[name])
    raise CobaRefusal(
        f"dataset {name!r} is unknown; choose one of {sorted(SOURCES)} or a group {sorted(GROUPS)}."
    )
