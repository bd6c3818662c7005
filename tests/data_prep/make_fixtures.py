"""Regenerate the small source-format fixtures in ``fixtures/`` (run from anywhere).

Each file mimics the columns of one upstream source with a handful of made-up problems, plus
rows that preparation must reject (no answer, duplicates, an answer no scorer can award).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent / "fixtures"
DAPO_PREFIX = (
    "Solve the following math problem step by step. The last line of your response should be of the "
    "form Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)
DAPO_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'


def jsonl(name: str, rows: list[dict]) -> None:
    with (HERE / name).open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")


def main() -> None:
    HERE.mkdir(exist_ok=True)
    # openai/gsm8k (config main): question, answer = worked solution ending in "#### n".
    jsonl(
        "gsm8k_train.jsonl",
        [
            {
                "question": "A baker fills 4 trays with 12 muffins each. How many muffins does she bake?",
                "answer": "Each tray holds 12, so 4 * 12 = <<4*12=48>>48 muffins.\n#### 48",
            },
            {
                "question": "A bike costs $1,000 and a helmet $250. What do both cost together?",
                "answer": "1000 + 250 = <<1000+250=1250>>1250.\n#### 1,250",
            },
            {
                "question": "Tom has 5 apples and eats 8. How many apples is he short?",
                "answer": "5 - 8 = -3.\n#### -3",
            },
            {
                "question": "Half of 5 litres is poured out. How many litres are poured?",
                "answer": "5 / 2 = 2.5 litres.\n#### 2.5",
            },
            {
                "question": "A farmer has 3 cows and buys 4 more. How many cows now?",
                "answer": "3 + 4 = 7 cows, so the answer is seven.",
            },  # no "####": rejected as no_answer
            {
                "question": "There are 9 birds and 2 fly away. How many remain?",
                "answer": "9 - 2 = <<9-2=7>>7\n#### 7",
            },
        ],
    )
    jsonl(
        "gsm8k_test.jsonl",
        [
            {"question": "Sam reads 6 pages a day for 7 days. How many pages?", "answer": "6*7=42\n#### 42"},
            {"question": "A box has 10 pens; 3 are red. How many are not red?", "answer": "10-3=7\n#### 7"},
            {"question": "What is 100 divided by 4?", "answer": "100/4=25\n#### 25"},
        ],
    )
    # DigitalLearningGmbH/MATH-lighteval: problem, level, type, solution with a final \boxed{}.
    jsonl(
        "math_train.jsonl",
        [
            {
                "problem": "What is $\\frac{2}{4}$ in lowest terms?",
                "level": "Level 1",
                "type": "Prealgebra",
                "solution": "Divide by 2: $\\frac{2}{4} = \\boxed{\\frac{1}{2}}$.",
            },
            {
                "problem": "Find $\\sin 60^\\circ$.",
                "level": "Level 2",
                "type": "Precalculus",
                "solution": "It is $\\boxed{\\frac{\\sqrt{3}}{2}}$.",
            },
            {
                "problem": "Which choice is prime: (A) 4 (B) 6 (C) 7?",
                "level": "Level 1",
                "type": "Number Theory",
                "solution": "Only 7 is prime, so the answer is $\\boxed{\\text{(C)}}$.",
            },
            {
                "problem": "Compute $3^2$.",
                "level": "Level 1",
                "type": "Algebra",
                "solution": "$3^2 = 9$.",
            },  # no \boxed: rejected as no_answer
            {
                "problem": "Solve $x + 1 = 3$.",
                "level": "Level 1",
                "type": "Algebra",
                "solution": "Subtract 1: $x = \\boxed{2}$.",
            },
            {
                "problem": "Give the interval where $x^2 < 1$.",
                "level": "Level 3",
                "type": "Algebra",
                "solution": "The answer is $\\boxed{(-1, 1)}$.",
            },
        ],
    )
    jsonl(
        "math_test.jsonl",
        [
            {
                "problem": "What is $1+1$?",
                "level": "Level 1",
                "type": "Prealgebra",
                "solution": "$1+1=\\boxed{2}$",
            },
            {
                "problem": "What is $2 \\cdot 5$?",
                "level": "Level 1",
                "type": "Prealgebra",
                "solution": "$\\boxed{10}$",
            },
        ],
    )
    # HuggingFaceH4/MATH-500: problem, solution, answer, subject, level, unique_id.
    jsonl(
        "math500_test.jsonl",
        [
            {
                "problem": "Simplify $\\sqrt{16}$.",
                "solution": "$\\sqrt{16} = \\boxed{4}$.",
                "answer": "4",
                "subject": "Algebra",
                "level": 1,
                "unique_id": "test/algebra/1.json",
            },
            {
                "problem": "What is $\\frac{3}{6}$ simplified?",
                "solution": "$\\boxed{\\frac{1}{2}}$",
                "answer": "\\frac{1}{2}",
                "subject": "Prealgebra",
                "level": 1,
                "unique_id": "test/prealgebra/2.json",
            },
            {
                "problem": "Evaluate $\\pi$ to the nearest integer.",
                "solution": "It is $\\boxed{3}$.",
                "answer": "",
                "subject": "Geometry",
                "level": 1,
                "unique_id": "test/geometry/3.json",
            },  # empty answer: use solution
            {
                "problem": "Write $0.5$ as a percent.",
                "solution": "$50\\%$",
                "answer": "50\\%",
                "subject": "Prealgebra",
                "level": 2,
                "unique_id": "test/prealgebra/4.json",
            },
        ],
    )
    # BytedTsinghua-SIA/DAPO-Math-17k: chat prompt with the DAPO template, reward_model, uuid index.
    problems = [
        ("Find the remainder when $2^{10}$ is divided by 7.", "2"),
        ("How many positive divisors does 36 have?", "9"),
        ("If $x^2 = 49$ and $x > 0$, what is $x$?", "7"),
        ("What is the sum of the interior angles of a hexagon, in degrees?", "720"),
        ("Compute $\\binom{6}{2}$.", "15"),
    ]
    rows = []
    for repeat in range(3):  # the release repeats every problem many times
        for k, (q, a) in enumerate(problems):
            rows.append(
                {
                    "data_source": "math_dapo",
                    "prompt": [{"content": DAPO_PREFIX + q + DAPO_SUFFIX, "role": "user"}],
                    "ability": "MATH",
                    "reward_model": {"ground_truth": a, "style": "rule-lighteval/MATH_v2"},
                    "extra_info": {"index": f"00000000-0000-4000-8000-{repeat:06d}{k:06d}"},
                }
            )
    rows.append(
        {  # same problem as the first, another answer: rejected as duplicate_conflict
            "data_source": "math_dapo",
            "prompt": [{"content": DAPO_PREFIX + problems[0][0] + DAPO_SUFFIX, "role": "user"}],
            "ability": "MATH",
            "reward_model": {"ground_truth": "4", "style": "rule-lighteval/MATH_v2"},
            "extra_info": {"index": "00000000-0000-4000-8000-999999000000"},
        }
    )
    rows.append(
        {  # empty ground truth: rejected as no_answer
            "data_source": "math_dapo",
            "prompt": [{"content": DAPO_PREFIX + "What is $5 - 5$?" + DAPO_SUFFIX, "role": "user"}],
            "ability": "MATH",
            "reward_model": {"ground_truth": "", "style": "rule-lighteval/MATH_v2"},
            "extra_info": {"index": "00000000-0000-4000-8000-999999000001"},
        }
    )
    rows.append(
        {  # a two-line answer the "Answer:" line cannot carry: rejected as unscorable_answer
            "data_source": "math_dapo",
            "prompt": [
                {"content": DAPO_PREFIX + "List the two roots of $x^2 = 9$." + DAPO_SUFFIX, "role": "user"}
            ],
            "ability": "MATH",
            "reward_model": {"ground_truth": "-3\n3", "style": "rule-lighteval/MATH_v2"},
            "extra_info": {"index": "00000000-0000-4000-8000-999999000002"},
        }
    )
    pq.write_table(pa.Table.from_pylist(rows), HERE / "dapo_math_17k.parquet")
    # open-r1/DAPO-Math-17k-Processed: bare problem in "prompt", final answer in "solution".
    jsonl(
        "dapo_math_processed.jsonl",
        [{"prompt": q, "solution": a, "data_source": "math_dapo", "ability": "MATH"} for q, a in problems],
    )
    # HuggingFaceH4/aime_2024: id, problem, solution, answer (string), url, year.
    jsonl(
        "aime2024.jsonl",
        [
            {
                "id": 60,
                "problem": "Find the number of ordered pairs $(a,b)$ of digits with $a+b=9$.",
                "solution": "There are $\\boxed{10}$.",
                "answer": "10",
                "url": "https://example.org/1",
                "year": "2024",
            },
            {
                "id": 61,
                "problem": "Find the least positive integer $n$ with $n^2 > 500$.",
                "solution": "$\\boxed{23}$",
                "answer": "023",
                "url": "https://example.org/2",
                "year": "2024",
            },
        ],
    )
    # MathArena/aime_2025: problem_idx, problem, answer (integer).
    jsonl(
        "aime2025.jsonl",
        [
            {"problem_idx": 1, "problem": "Find $17 \\cdot 3$.", "answer": 51},
            {"problem_idx": 2, "problem": "Find the number of subsets of a 4-element set.", "answer": 16},
        ],
    )
    # math-ai/amc23: id, question, answer (a float in some copies).
    jsonl(
        "amc23.jsonl",
        [
            {"id": 0, "question": "What is $3^3$?", "answer": 27.0},
            {"id": 1, "question": "What is one half of 5?", "answer": 2.5},
            {"id": 2, "question": "What is $2+2$?", "answer": None},  # rejected as no_answer
        ],
    )
    # math-ai/minervamath: question, answer.
    jsonl(
        "minerva.jsonl",
        [
            {"question": "A car moves at 20 m/s for 3 s. How far does it go, in metres?", "answer": "60"},
            {"question": "Compute the kinetic energy in J of 2 kg at 3 m/s.", "answer": "9"},
        ],
    )
    # Hothan/OlympiadBench (OE_TO_maths_en_COMP): id, question, final_answer (list), context, solution (list).
    pq.write_table(
        pa.Table.from_pylist(
            [
                {
                    "id": 1606,
                    "question": "Compute the smallest prime greater than 20.",
                    "final_answer": ["$23$"],
                    "context": None,
                    "solution": ["Check 21 and 22."],
                    "is_multiple_answer": False,
                },
                {
                    "id": 1607,
                    "question": "Find all real $x$ with $x^2=4$.",
                    "final_answer": ["$-2$", "$2$"],
                    "context": None,
                    "solution": ["Take square roots."],
                    "is_multiple_answer": True,
                },
                {
                    "id": 1608,
                    "question": "Find $a+b$.",
                    "final_answer": ["$5$"],
                    "context": "Let $a=2$ and $b=3$.",
                    "solution": ["Add."],
                    "is_multiple_answer": False,
                },
            ]
        ),
        HERE / "olympiadbench.parquet",
    )


if __name__ == "__main__":
    main()
