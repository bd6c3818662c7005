"""``coba-verl estimate``: each training prompt's pass rate, measured by veRL before training.

The measurement is veRL's own validation pass, run over the training set with the run's model,
generation engine and reward function (vLLM / SGLang on GPUs, the ``coba_cpu`` backend's ``hf``
rollout on CPU); coba-verl generates nothing itself::

    coba-verl estimate --output priors.jsonl --samples 8 [--cpu] [veRL / coba overrides ...]
    coba-verl train ... coba.prior_file=priors.jsonl

It takes the same config and overrides as ``coba-verl train`` (so a recipe's launch line with
``train`` replaced by ``estimate``) and changes only what a measurement needs (`configure`):

====================================================  ==============================================
``data.val_files``                                    ``data.train_files`` (every training prompt)
``actor_rollout_ref.rollout.val_kwargs``              ``n = --samples``, ``do_sample = true`` and the
                                                      training rollout's temperature, top_p, top_k
``reward.custom_reward_function``                     this module's `compute_score` around the run's own
                                                      function (adds ``extra_info.index`` to each
                                                      dumped row; the score is unchanged)
``trainer.val_only`` / ``val_before_train``           true / true: validate once, train nothing
``trainer.validation_data_dir``                       ``--generations-dir`` (default: beside the output)
``trainer.resume_mode``                               disable (the model is ``model.path``)
``trainer.use_v1``                                    true (the V1 trainer's validation loop)
``data.val_batch_size``                               ``data.train_batch_size`` when unset (progress)
``data.validation_shuffle``                           false
``coba.prior_file`` / ``coba.prior_field``            null (a measurement starts from nothing)
====================================================  ==============================================

veRL dumps every generation (``<generations-dir>/0.jsonl``: input, output, score, the reward's
extra values); `prior_records` turns them into one record per prompt, successes = the number of
samples whose score equals ``coba.success_value`` (the tracker's rule, spec §2), attempts = the
samples that came back (a failed rollout is not counted; a warning says how many prompts got
fewer than ``--samples``). The output is the JSON-lines file ``coba.prior_file`` reads. Training
prompts veRL's dataset dropped (``data.filter_overlong_prompts``, ``data.val_max_samples``) get
no record, and a warning counts them. The dump must be on a file system the launching machine
shares with veRL's TaskRunner (as checkpoints are).

The reward function around the run's own (`compute_score`, `compute_score_async`, loaded by veRL's
reward workers from `INDEX_REWARD_PATH`): veRL's validation dump holds, for every generation, the
prompt text, the score and the reward function's extra values, but not ``extra_info.index`` (its
``uid`` is a random UUID per validation batch), and prompt text does not identify a prompt (two rows
may share it). `configure` therefore sets::

    reward.custom_reward_function.path = pkg://coba_verl.verl_plugin.estimate
    reward.custom_reward_function.name = compute_score          (compute_score_async for an async one)
    reward.custom_reward_function.reward_kwargs.coba_inner_path = <the run's path, or null: veRL's default>
    reward.custom_reward_function.reward_kwargs.coba_inner_name = <the run's name>

The score is the inner function's, unchanged; the result is a dict (veRL's reward managers take
``score`` and keep the other keys as ``reward_extra_info``, which the dump writes per row) with one
more key, `INDEX_KEY`: the prompt's ``extra_info.index`` as JSON text (text, so that veRL's validation
metrics skip it instead of averaging indices; JSON, so that it reads back with its type). A float
result becomes ``{"score": s, "acc": s}``, as veRL's naive manager reports it.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf, open_dict

from coba_verl.records.priors import PriorRecords, outcome_records, write_prior_file
from coba_verl.refusal import CobaRefusal, exit_on_refusal
from coba_verl.verl_plugin.launch import preflight

__all__ = [
    "INDEX_KEY", "EstimateRequest", "compute_score", "compute_score_async", "configure", "main",
    "prior_records", "read_generations", "summary",
]  # fmt: skip

logger = logging.getLogger(__name__)

#: The reward module `configure` puts around the run's own reward function: this one.
INDEX_REWARD_PATH = "pkg://coba_verl.verl_plugin.estimate"
#: The reward_extra_info key holding ``json.dumps(extra_info["index"])``.
INDEX_KEY = "coba_index"
#: reward_kwargs keys naming the run's own reward function (path None: veRL's default_compute_score).
INNER_PATH_KEY = "coba_inner_path"
INNER_NAME_KEY = "coba_inner_name"


@dataclass(frozen=True)
class EstimateRequest:
    """What ``coba-verl estimate`` was asked for (its own flags; the rest are Hydra overrides).

    Attributes:
        output: the JSON-lines prior file to write.
        samples: generations per prompt (k).
        generations_dir: where veRL dumps the generations (``trainer.validation_data_dir``).
    """

    output: Path
    samples: int
    generations_dir: Path


def parse_args(argv: list[str]) -> tuple[EstimateRequest, list[str]]:
    """Split ``argv`` into our flags and the Hydra arguments (``--cpu`` becomes ``+coba_cpu=cpu``).

    Raises:
        SystemExit: argparse's usage error (status 2), e.g. ``--samples 0``.
    """
    parser = argparse.ArgumentParser(
        prog="coba-verl estimate",
        description=(
            "Measure each training prompt's pass rate with veRL's validation pass (the run's model, "
            "engine and reward) and write them as coba.prior_file records. Every other argument is "
            "a veRL / coba override, as for coba-verl train."
        ),
    )
    parser.add_argument("--output", required=True, type=Path, help="prior file to write (JSON lines)")
    parser.add_argument("--samples", type=int, default=8, help="generations per prompt, k (default 8)")
    parser.add_argument(
        "--generations-dir", type=Path, default=None,
        help="veRL's dump of the generations (default: OUTPUT without its suffix + '.generations')",
    )  # fmt: skip
    parser.add_argument("--cpu", action="store_true", help="the CPU backend (+coba_cpu=cpu), a tiny model")
    ours, rest = parser.parse_known_args(argv)
    if ours.samples < 1:
        parser.error(f"--samples {ours.samples}: needs at least 1 generation per prompt")
    output = ours.output.expanduser().resolve()
    generations = ours.generations_dir or output.with_suffix(".generations")
    request = EstimateRequest(output, int(ours.samples), generations.expanduser().resolve())
    return request, (["+coba_cpu=cpu"] if ours.cpu else []) + rest


def configure(config: DictConfig, request: EstimateRequest) -> None:
    """Turn a training config into the validation-only measurement (the table of the module doc)."""
    rollout = config.actor_rollout_ref.rollout
    custom = OmegaConf.select(config, "reward.custom_reward_function") or {}
    inner_path = custom.get("path") or None
    inner_name = custom.get("name") or "compute_score"
    inner = inner_function(inner_path, inner_name)
    name = "compute_score_async" if inspect.iscoroutinefunction(inner) else "compute_score"
    with open_dict(config):
        config.data.val_files = config.data.train_files
        config.data.validation_shuffle = False
        if config.data.get("val_batch_size") is None:
            config.data.val_batch_size = int(config.data.train_batch_size)
        val = rollout.val_kwargs
        val.n = request.samples
        val.do_sample = True
        for key in ("temperature", "top_p", "top_k"):
            if key in rollout:
                val[key] = rollout[key]
        kwargs = dict(custom.get("reward_kwargs") or {})
        kwargs.update({INNER_PATH_KEY: inner_path, INNER_NAME_KEY: inner_name})
        wrapped = {"path": INDEX_REWARD_PATH, "name": name, "reward_kwargs": kwargs}
        config.reward.custom_reward_function = wrapped
        config.trainer.use_v1 = True
        config.trainer.val_only = True
        config.trainer.val_before_train = True
        config.trainer.resume_mode = "disable"
        config.trainer.validation_data_dir = str(request.generations_dir)
        if "coba" in config:
            config.coba.prior_file = None
            config.coba.prior_field = None


def training_indices(config: DictConfig) -> list[Any] | None:
    """``extra_info.index`` of every row of the local training files; None if one is remote."""
    import pyarrow.parquet as pq

    files = preflight.data_files(config.data.train_files)
    if any(preflight.is_remote(f) for f in files):
        return None
    out: list[Any] = []
    for path in files:
        rows = pq.read_table(Path(path).expanduser(), columns=["extra_info"]).column("extra_info").to_pylist()
        out.extend((row or {}).get("index") for row in rows)
    return out


def read_generations(folder: Path) -> tuple[list[Any], list[float]]:
    """(prompt index, score) of every generation in veRL's dump ``folder/*.jsonl``.

    Raises:
        RuntimeError: no dump, or rows without the index (the reward wrapper was not in effect).
    """
    files = sorted(folder.glob("*.jsonl"))
    if not files:
        raise RuntimeError(f"veRL wrote no generations to {folder}: did its validation pass run?")
    index: list[Any] = []
    scores: list[float] = []
    for file in files:
        for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
            row = json.loads(line)
            if INDEX_KEY not in row:
                raise RuntimeError(
                    f"{file} line {number} has no {INDEX_KEY}: its reward did not go through "
                    f"{INDEX_REWARD_PATH} (was reward.custom_reward_function overridden after configure?)"
                )
            index.append(json.loads(row[INDEX_KEY]))
            scores.append(float(row["score"]))
    return index, scores


def prior_records(folder: Path, success_value: float) -> PriorRecords:
    """One (successes, attempts) record per prompt of veRL's dump (`read_generations`)."""
    index, scores = read_generations(folder)
    return outcome_records(index, scores, success_value, f"generations in {folder}")


def in_order(records: PriorRecords, order: list[Any]) -> PriorRecords:
    """``records`` sorted by ``order`` (the training files' row order); indices not in it last."""
    rank = {value: i for i, value in reversed(list(enumerate(order)))}
    keys = sorted(range(len(records.index)), key=lambda i: rank.get(records.index[i], len(rank)))
    return PriorRecords(
        [records.index[i] for i in keys], records.successes[keys], records.attempts[keys], records.source
    )


def summary(records: PriorRecords, samples: int, expected: list[Any] | None) -> dict[str, float]:
    """What the estimate found, logged; warnings for short prompts and training prompts without a record."""
    rates = records.successes / records.attempts
    nan = float("nan")
    short = int((records.attempts < samples).sum())
    found = {
        "prompts": float(len(records.index)),
        "generations": float(records.attempts.sum()),
        "pass_rate_mean": float(rates.mean()) if rates.size else nan,
        "all_fail_share": float((rates == 0).mean()) if rates.size else nan,
        "all_pass_share": float((rates == 1).mean()) if rates.size else nan,
        "short_prompts": float(short),
    }
    if short:
        logger.warning(
            "%d prompts got fewer than %d samples back (failed rollouts are not counted as attempts)",
            short, samples,
        )  # fmt: skip
    if expected is not None:
        missing = len(set(expected) - set(records.index))
        found["training_prompts_without_record"] = float(missing)
        if missing:
            logger.warning(
                "%d of %d training prompts have no estimate (dropped by veRL's dataset: "
                "data.filter_overlong_prompts or data.val_max_samples); they start without a prior",
                missing, len(set(expected)),
            )  # fmt: skip
    return found


_REQUEST: EstimateRequest | None = None  # set by main() for the Hydra entry


def run(config: DictConfig, request: EstimateRequest) -> dict[str, float]:
    """Measure (veRL's validation pass through `coba_verl.verl_plugin.main.run`), then write the priors."""
    from coba_verl.verl_plugin import main as train_main

    configure(config, request)
    preflight.check_data_files(config)  # before the training files are read just below
    expected = training_indices(config)
    prompts = len(expected) if expected is not None else None
    limit = int(config.data.get("val_max_samples", -1) or -1)
    if prompts is not None and limit > 0:
        prompts = min(prompts, limit)
    logger.info(
        "coba-verl estimate: %s prompts x %d samples = %s generations with %s; dump in %s",
        prompts if prompts is not None else "?", request.samples,
        prompts * request.samples if prompts is not None else "?",
        config.actor_rollout_ref.model.path, request.generations_dir,
    )  # fmt: skip
    request.generations_dir.mkdir(parents=True, exist_ok=True)
    for old in request.generations_dir.glob("*.jsonl"):
        old.unlink()  # an earlier estimate's dump: this one replaces it
    train_main.run(config)
    success_value = float(OmegaConf.select(config, "coba.success_value", default=1.0))
    records = prior_records(request.generations_dir, success_value)
    if expected is not None:
        records = in_order(records, expected)
    found = summary(records, request.samples, expected)
    write_prior_file(request.output, records)
    logger.info(
        "coba-verl estimate: %d prompts, mean pass rate %.3f (%.0f%% all fail, %.0f%% all pass) -> %s; "
        "train with coba.prior_file=%s",
        len(records.index), found["pass_rate_mean"], 100 * found["all_fail_share"],
        100 * found["all_pass_share"], request.output, request.output,
    )  # fmt: skip
    return found


@hydra.main(config_path="../config", config_name="coba_trainer", version_base=None)
def _entry(config: DictConfig) -> None:
    assert _REQUEST is not None, "coba_verl.verl_plugin.estimate: call main(), not the Hydra entry"
    logging.getLogger("coba_verl").setLevel(logging.INFO)
    with exit_on_refusal():
        run(config, _REQUEST)


def main(argv: list[str] | None = None) -> int:
    """``coba-verl estimate --output F [--samples K] [--cpu] [overrides]``"""
    global _REQUEST
    request, hydra_args = parse_args(list(sys.argv[1:] if argv is None else argv))
    _REQUEST = request
    sys.argv = ["coba-verl estimate", *hydra_args]
    _entry()
    return 0


if __name__ == "__main__":
    sys.exit(main())


# --- the reward function around the run's own, in veRL's reward workers (module doc)


@functools.cache
def inner_function(path: str | None, name: str | None) -> Callable[..., Any]:
    """The run's reward function: ``path``/``name`` as veRL loads them, or veRL's default one."""
    if not path:
        from verl.utils.reward_score import default_compute_score

        return default_compute_score
    from verl.utils.import_utils import load_extern_object

    return load_extern_object(module_path=path, object_name=name or "compute_score")


def _split(kwargs: dict[str, Any]) -> tuple[Callable[..., Any], dict[str, Any]]:
    """(inner function, the call's keyword arguments without ours)."""
    rest = dict(kwargs)
    path = rest.pop(INNER_PATH_KEY, None)
    name = rest.pop(INNER_NAME_KEY, None)
    return inner_function(path, name), rest


def index_text(extra_info: Any) -> str:
    """``json.dumps(extra_info["index"])``.

    Raises:
        ValueError: the row has no ``extra_info.index`` (coba-verl's preflight checks the training
            files for it, so this means a dataset class that drops it).
    """
    if not isinstance(extra_info, dict) or extra_info.get("index") is None:
        keys = sorted(extra_info) if isinstance(extra_info, dict) else type(extra_info).__name__
        raise CobaRefusal(
            f"a sample reached the reward function without extra_info.index (extra_info: {keys}); "
            "coba-verl estimate keys each prompt's pass rate by it."
        )
    return json.dumps(extra_info["index"])


def with_index(result: Any, extra_info: Any) -> dict[str, Any]:
    """The inner result as veRL's managers read it, plus `INDEX_KEY`."""
    out = dict(result) if isinstance(result, dict) else {"score": result, "acc": result}
    out[INDEX_KEY] = index_text(extra_info)
    return out


def _extra_info(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``extra_info`` of a call ``(data_source, solution_str, ground_truth, extra_info, ...)``."""
    return kwargs["extra_info"] if "extra_info" in kwargs else (args[3] if len(args) > 3 else None)


def compute_score(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """The run's (synchronous) reward function's score, with the prompt's index."""
    fn, rest = _split(kwargs)
    return with_index(fn(*args, **rest), _extra_info(args, rest))


async def compute_score_async(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """The run's asynchronous reward function's score, with the prompt's index."""
    fn, rest = _split(kwargs)
    return with_index(await fn(*args, **rest), _extra_info(args, rest))
