"""The tiny CPU recipe's data, model and reward: the arithmetic task as a veRL dataset.

``python -m coba_verl.arithmetic.tiny --output-dir ~/data/coba/tiny_cpu`` writes, with nothing
downloaded::

    train.parquet, test.parquet   veRL RL parquet (prompt, reward_model.ground_truth,
                                  extra_info.index): the generated arithmetic of
                                  `coba_verl.arithmetic.task`
    model/                        a from-scratch Qwen2 (0.43 M parameters) and its tokenizer,
                                  warm-started by `coba_verl.arithmetic.warmstart` until its pass rates
                                  span easy (short sums) to never solved (three-by-two products)
    prepare.json                  the arguments, steps and seconds; a rerun with the same
                                  arguments reuses the output (--force redoes it)
    priors.jsonl                  with ``--priors K``: every training prompt's pass rate, K
                                  samples of the model at the recipe's temperature and response
                                  length, for ``coba.prior_file`` (epoch 1 then allocates too)

The tokenizer is `coba_verl.arithmetic.tokenizer.chat_tokenizer` (one token per character, ChatML's
special tokens, a chat template that renders a prompt as the lab encodes it)::

    [{"role": "user", "content": "47*8="}]  ->  "<bos>47*8="  ->  [1, 25, 28, 15, 29, 34]

The reward (`compute_score`, ``reward.custom_reward_function.path=pkg://coba_verl.arithmetic.tiny``) is
`coba_verl.arithmetic.task.verify`: 1.0 iff the decoded response is exactly the answer.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coba_verl.refusal import CobaRefusal

if TYPE_CHECKING:
    from coba_verl.arithmetic.task import Split

__all__ = ["DATA_SOURCE", "PRIORS", "compute_score", "main", "measure_priors", "prepare", "write_data"]

logger = logging.getLogger(__name__)

#: ``data_source`` of every row (validation metrics are grouped by it).
DATA_SOURCE = "coba_arithmetic"


def compute_score(
    data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None, **kwargs: Any
) -> float:
    """veRL custom reward: 1.0 iff the response is exactly the answer's digits (`task.verify`)."""
    from coba_verl.arithmetic.task import verify

    return verify(solution_str, str(ground_truth))


def _rows(prompts: list[str], answers: list[str], split: str) -> list[dict[str, Any]]:
    return [
        {
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": prompt}],
            "ability": "arithmetic",
            "reward_model": {"style": "rule", "ground_truth": answer},
            "extra_info": {"index": index, "split": split},
        }
        for index, (prompt, answer) in enumerate(zip(prompts, answers, strict=True))
    ]


#: Warm-start settings: the default (a few minutes on 2 cores) and ``--long`` (about half an hour).
FAST_WARM = {"warm_target": 0.2, "warm_max_steps": 1200}
LONG_WARM = {"warm_target": 0.4, "warm_max_steps": 3000}
#: ``--easy`` (scripts/quickstart.sh): the two easy levels and a warm start of about a minute, which
#: leaves the prompts' pass rates spread between 0 and 1 (the end-to-end tests' model, at full size).
EASY = {"levels": ["2+1", "2-1"], "warm_target": 0.25, "warm_max_steps": 600}
#: Written last by `prepare`: its arguments, so that a rerun with the same ones reuses the output.
MANIFEST = "prepare.json"
#: Written by `measure_priors`: (successes, attempts) of every training prompt, for ``coba.prior_file``.
PRIORS = "priors.jsonl"
#: The tiny recipe's response length and rollout temperature (recipes/tiny_cpu/config/_tiny.yaml).
RECIPE_MAX_TOKENS = 8
RECIPE_TEMPERATURE = 1.0


def _level_kwargs(levels: Sequence[str] | None) -> dict[str, Any]:
    """``{"levels": (Level, ...)}`` for `make_splits` / `warm_start`, or ``{}`` for their defaults."""
    if levels is None:
        return {}
    from coba_verl.arithmetic.task import parse_levels

    return {"levels": parse_levels(dict.fromkeys(levels, 1.0))}


def _splits(seed: int, n_train: int, n_test: int, levels: Sequence[str] | None) -> tuple[Split, Split]:
    """The training and held-out prompts of ``seed`` (`task.make_splits`, which draws the training
    prompts first: they do not depend on ``n_test``)."""
    from coba_verl.arithmetic.task import make_splits

    return make_splits(seed, n_train, n_test, **_level_kwargs(levels))


def _write_split(path: Path, split: Split, name: str) -> Path:
    """Write ``split``'s prompts to ``path`` as veRL's rows (`_rows`, ``extra_info.split = name``)."""
    import pandas as pd

    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(_rows(split.prompts, split.answers, name)).to_parquet(path)
    return path


def write_data(
    output_dir: str | Path,
    *,
    n_train: int = 256,
    n_test: int = 64,
    seed: int = 0,
    levels: Sequence[str] | None = None,
) -> Path:
    """Write ``train.parquet`` and ``test.parquet`` (`task.make_splits`) under ``output_dir``.

    ``levels`` names the task levels to draw from (e.g. ``["2+1", "2-1"]``); None: all of them.
    """
    out = Path(output_dir).expanduser()
    train, test = _splits(seed, n_train, n_test, levels)
    _write_split(out / "train.parquet", train, "train")
    _write_split(out / "test.parquet", test, "test")
    return out


def write_extra_test_set(
    output_dir: str | Path,
    n_test: int,
    *,
    n_train: int = 256,
    seed: int = 0,
    levels: Sequence[str] | None = None,
) -> Path:
    """Write ``test_<n_test>.parquet`` under ``output_dir``: the held-out prompts `write_data` would
    write with ``n_test`` (`task.make_splits` draws the training prompts first, so they are the same
    and the new set is disjoint from them); ``train.parquet``, ``test.parquet`` and the model are left
    as they are. The model's warm start excluded the prompts of ``test.parquet`` only, so a prompt of
    the larger set may have been among its fresh problems (never among the GRPO training prompts).
    The DAPO bench (``recipes/tiny_cpu/config/dapo_bench.yaml``) validates on ``test_256.parquet``."""
    _, test = _splits(seed, n_train, n_test, levels)
    return _write_split(Path(output_dir).expanduser() / f"test_{n_test}.parquet", test, "test")


def prepare(
    output_dir: str | Path,
    *,
    n_train: int = 256,
    n_test: int = 64,
    seed: int = 0,
    warm_target: float = FAST_WARM["warm_target"],
    warm_max_steps: int = FAST_WARM["warm_max_steps"],
    levels: Sequence[str] | None = None,
    force: bool = False,
) -> Path:
    """Write ``train.parquet``, ``test.parquet`` and ``model/`` under ``output_dir``; return it.

    The model is the tiny Qwen2 of `coba_verl.arithmetic.model` (`ModelSpec` defaults) fitted by
    `coba_verl.arithmetic.warmstart.warm_start` on fresh problems (never the training or test
    prompts) until its probe accuracy (temperature 1, warm-start levels) reaches ``warm_target``
    or ``warm_max_steps`` are done. ``levels`` restricts data and warm start to the named task
    levels (``["2+1", "2-1"]``: the easy sums and differences, which a short warm start already
    solves part of the time; ``--easy`` and the end-to-end tests use them for a model whose pass
    rates spread between 0 and 1 after about a minute). None: all levels.
    When ``output_dir`` already holds the output of the same arguments (its ``prepare.json``, and
    the parquet files and model it describes), nothing is redone unless ``force``.
    """
    import json
    import time

    import torch

    from coba_verl.arithmetic.model import ModelSpec, build_model_for
    from coba_verl.arithmetic.tokenizer import chat_tokenizer
    from coba_verl.arithmetic.warmstart import warm_start

    out = Path(output_dir).expanduser()
    arguments = {
        "n_train": n_train, "n_test": n_test, "seed": seed,
        "warm_target": warm_target, "warm_max_steps": warm_max_steps,
    }  # fmt: skip
    if levels is not None:
        arguments["levels"] = list(levels)
    manifest = out / MANIFEST
    outputs = [out / "train.parquet", out / "test.parquet", out / "model" / "config.json"]
    if (
        not force
        and manifest.is_file()
        and json.loads(manifest.read_text()).get("arguments") == arguments
        and all(path.is_file() for path in outputs)
    ):
        logger.info("%s already holds this output (%s); reusing it (--force to redo)", out, manifest)
        return out
    manifest.unlink(missing_ok=True)  # a half-written output is never reused
    start = time.perf_counter()
    write_data(out, n_train=n_train, n_test=n_test, seed=seed, levels=levels)
    train, test = _splits(seed, n_train, n_test, levels)

    tokenizer = chat_tokenizer()
    backend = tokenizer.backend_tokenizer  # what the warm start encodes with
    model = build_model_for(tokenizer, ModelSpec(), seed=seed)
    torch.manual_seed(seed)
    result = warm_start(
        model,
        backend,
        max_steps=warm_max_steps,
        batch_size=128,
        lr=3e-3,
        seed=seed,
        target=warm_target,
        exclude=frozenset(train.prompts) | frozenset(test.prompts),
        **_level_kwargs(levels),
    )
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out / "model")
    tokenizer.save_pretrained(out / "model")
    seconds = time.perf_counter() - start
    logger.info(
        "warm start: %d steps, probe accuracy %s; prepared in %.0f s",
        result.steps,
        result.probe_acc[-1:],
        seconds,
    )
    record = {"arguments": arguments, "warm_steps": result.steps, "probe_acc": result.probe_acc[-1:]}
    manifest.write_text(json.dumps({**record, "seconds": round(seconds, 1)}, indent=2) + "\n")
    return out


def measure_priors(output_dir: str | Path, samples: int, *, seed: int = 0) -> Path:
    """Write ``priors.jsonl`` under ``output_dir`` (the output of `prepare`) and return its path.

    Each training prompt (``extra_info.index``) gets ``samples`` answers of the prepared model at
    the recipe's temperature and response length, scored by `compute_score`'s rule; the file holds
    ``{"index", "successes", "attempts"}`` lines (`coba_verl.records.priors.write_prior_file`). The
    samples are drawn with their own seeded generator, so the same arguments write the same file.
    """
    import numpy as np
    import pandas as pd
    import torch
    from transformers import Qwen2ForCausalLM

    from coba_verl.arithmetic.outcomes import sample_scores
    from coba_verl.arithmetic.tokenizer import chat_tokenizer, encode_prompts
    from coba_verl.records.priors import outcome_records, write_prior_file

    if samples < 1:
        raise CobaRefusal(f"samples={samples}: measure at least one answer per prompt.")
    out = Path(output_dir).expanduser()
    frame = pd.read_parquet(out / "train.parquet")
    prompts = [row[0]["content"] for row in frame["prompt"]]
    answers = [str(reward["ground_truth"]) for reward in frame["reward_model"]]
    index = [int(extra["index"]) for extra in frame["extra_info"]]
    model = Qwen2ForCausalLM.from_pretrained(out / "model").eval()
    backend = chat_tokenizer().backend_tokenizer
    ids, mask = encode_prompts(backend, prompts)
    generator = torch.Generator().manual_seed(seed + 7_919)
    rows, scores = sample_scores(
        model, backend, ids, mask, answers, samples, generator, max_new_tokens=RECIPE_MAX_TOKENS,
        temperature=RECIPE_TEMPERATURE,
    )  # fmt: skip
    records = outcome_records([index[i] for i in rows], scores.tolist(), 1.0, f"{samples} samples a prompt")
    rates = records.successes / records.attempts
    logger.info(
        "priors: %d prompts x %d samples, mean pass rate %.3f (%.0f%% all fail, %.0f%% all pass)",
        len(prompts), samples, rates.mean(), 100 * np.mean(rates == 0), 100 * np.mean(rates == 1),
    )  # fmt: skip
    return write_prior_file(out / PRIORS, records)


def main(argv: list[str] | None = None) -> int:
    """``python -m coba_verl.arithmetic.tiny --output-dir DIR``: write the tiny recipe's data and model."""
    parser = argparse.ArgumentParser(
        prog="python -m coba_verl.arithmetic.tiny",
        description="Write the tiny CPU recipe's parquet files and warm-started model "
        "(nothing is downloaded). A rerun with the same arguments reuses the output.",
    )
    parser.add_argument("--output-dir", default="~/data/coba/tiny_cpu", help="default: %(default)s")
    parser.add_argument("--train-size", type=int, default=256, help="training prompts (default: %(default)s)")
    parser.add_argument("--test-size", type=int, default=64, help="validation prompts (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="data and model seed (default: %(default)s)")
    parser.add_argument(
        "--long",
        action="store_true",
        help=f"the longer warm start (probe accuracy {LONG_WARM['warm_target']}, at most "
        f"{LONG_WARM['warm_max_steps']} steps: about half an hour on 2 cores) instead of the default "
        f"({FAST_WARM['warm_target']}, at most {FAST_WARM['warm_max_steps']} steps: a few minutes)",
    )
    parser.add_argument(
        "--easy",
        action="store_true",
        help=f"only the levels {', '.join(EASY['levels'])} and a short warm start (probe accuracy "
        f"{EASY['warm_target']}, at most {EASY['warm_max_steps']} steps: about a minute), which leaves "
        "pass rates spread between 0 and 1 (the quick start's data)",
    )
    parser.add_argument("--force", action="store_true", help="redo the output even if it is already there")
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch CPU threads (default: 0, torch's own, one per core; 1 stays fast where other "
        "jobs share the cores, see docs/cpu_backend.md)",
    )
    parser.add_argument(
        "--priors",
        type=int,
        default=0,
        metavar="K",
        help=f"also write {PRIORS}: every training prompt's pass rate from K samples of the model "
        "(a few seconds; train with coba.prior_file=<output-dir>/" + PRIORS + "); default: none",
    )
    parser.add_argument(
        "--extra-test-size",
        type=int,
        default=0,
        metavar="N",
        help="also write test_N.parquet: N held-out prompts beside the test set, disjoint from the "
        "training prompts (the DAPO bench validates on --extra-test-size 256); default: none",
    )
    args = parser.parse_args(argv)
    if args.long and args.easy:
        parser.error("--long and --easy are two different warm starts: choose one")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.threads > 0:
        import torch

        torch.set_num_threads(args.threads)
    out = prepare(
        args.output_dir,
        n_train=args.train_size,
        n_test=args.test_size,
        seed=args.seed,
        force=args.force,
        **(LONG_WARM if args.long else EASY if args.easy else FAST_WARM),
    )
    logger.info("wrote %s/{train,test}.parquet and %s/model", out, out)
    if args.priors:
        logger.info("wrote %s", measure_priors(out, args.priors, seed=args.seed))
    if args.extra_test_size:
        levels = EASY["levels"] if args.easy else None
        extra = write_extra_test_set(
            out, args.extra_test_size, n_train=args.train_size, seed=args.seed, levels=levels
        )
        logger.info("wrote %s", extra)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
