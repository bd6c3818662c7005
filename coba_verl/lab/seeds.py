"""A lab seed's preparation, done once for all its runs (`SeedContext`): the generated splits, the
tokenizer, the supervised warm start (cached under a hash of the config and of the code that makes
it, `prepare_seed`) and the order in which the runs see the training prompts (`prompt_stream`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers
from tokenizers import Tokenizer
from transformers import Qwen2ForCausalLM

from coba_verl.arithmetic.model import ModelSpec, build_model
from coba_verl.arithmetic.task import Level, Split, make_splits
from coba_verl.arithmetic.tokenizer import BOS, EOS, PAD, build_tokenizer, encode_prompts
from coba_verl.arithmetic.warmstart import warm_start
from coba_verl.lab.config import LabConfig
from coba_verl.records.priors import PriorRecords

logger = logging.getLogger(__name__)


@dataclass
class SeedContext:
    """Everything a seed's runs share: data, tokenizer, warm-start weights, prompt order."""

    seed: int
    tok: Tokenizer
    train: Split
    eval: Split
    levels: tuple[Level, ...]
    train_ids: torch.Tensor  # (N_train, P) left-padded "<bos>prompt"
    train_mask: torch.Tensor
    eval_ids: torch.Tensor  # (N_eval, P)
    eval_mask: torch.Tensor
    max_new_tokens: int
    order: np.ndarray  # (steps, M) int64 prompt ids of each step
    warm_state: dict[str, torch.Tensor]
    warm_seconds: float
    warm_cached: bool
    info: dict[str, Any] = field(default_factory=dict)
    #: k -> the warm start's pass-rate records of the training prompts (`measure_priors`), shared
    #: by the seed's ``+prior`` runs.
    priors: dict[int, PriorRecords] = field(default_factory=dict)


def _model_spec(cfg: LabConfig) -> ModelSpec:
    return ModelSpec(
        hidden_size=cfg.hidden_size, num_layers=cfg.num_layers, intermediate_size=cfg.intermediate_size
    )


def new_model(cfg: LabConfig, tok: Tokenizer, seed: int) -> Qwen2ForCausalLM:
    """The lab's tiny Qwen2, randomly initialised from ``seed``."""
    return build_model(
        _model_spec(cfg),
        tok.get_vocab_size(),
        pad_id=tok.token_to_id(PAD),
        bos_id=tok.token_to_id(BOS),
        eos_id=tok.token_to_id(EOS),
        seed=seed,
    )


def prompt_stream(n_train: int, seed: int) -> Callable[[int], np.ndarray]:
    """``next_ids(k) -> (k,)``: the seed's prompt ids in order, epochs of a seeded shuffle of
    0..n_train-1 one after another, without end (DAPO's refills draw past ``steps`` x M)."""
    rng = np.random.default_rng([seed, 0x0D7])
    buffer = np.zeros(0, np.int64)

    def next_ids(k: int) -> np.ndarray:
        nonlocal buffer
        while buffer.size < k:
            buffer = np.concatenate([buffer, rng.permutation(n_train).astype(np.int64)])
        out, buffer = buffer[:k], buffer[k:]
        return out

    return next_ids


def prompt_order(n_train: int, m: int, steps: int, seed: int) -> np.ndarray:
    """(steps, M) prompt ids: the first steps x M of `prompt_stream`, M at a time.

    A batch never straddles two epochs' duplicates: the last partial batch of an epoch is
    completed from the next epoch's permutation, as a drop-last-free sampler would.
    """
    return prompt_stream(n_train, seed)(steps * m).reshape(steps, m)


def _source_digest() -> str:
    """Hash of the code that determines the warm-start weights, so edits invalidate the cache."""
    from coba_verl.arithmetic import model, task, tokenizer, warmstart

    h = hashlib.sha256()
    for mod in (model, task, tokenizer, warmstart):
        h.update(Path(mod.__file__).read_bytes())
    return h.hexdigest()[:16]


def _cache_key(cfg: LabConfig, seed: int) -> str:
    blob = json.dumps(
        {
            "code": _source_digest(),
            "seed": seed,
            "levels": cfg.levels,
            "warm_levels": cfg.warm_levels,
            "device": str(cfg.device),
            "n": [cfg.n_train, cfg.n_eval],
            "model": _model_spec(cfg).__dict__,
            "warm": [cfg.warm_steps, cfg.warm_target, cfg.warm_batch_size, cfg.warm_lr],
            "threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def build_context(
    cfg: LabConfig,
    seed: int,
    train: Split,
    held_out: Split,
    warm_state: dict[str, torch.Tensor],
    *,
    warm_seconds: float = 0.0,
    warm_cached: bool = False,
) -> SeedContext:
    """Assemble a `SeedContext` from splits and weights (tests use it with hand-made splits)."""
    tok = build_tokenizer()
    tr_ids, tr_mask = encode_prompts(tok, train.prompts)
    ev_ids, ev_mask = encode_prompts(tok, held_out.prompts)
    longest = max(len(a) for a in train.answers + held_out.answers)
    return SeedContext(
        seed=seed,
        levels=cfg.level_table,
        tok=tok,
        train=train,
        eval=held_out,
        train_ids=tr_ids,
        train_mask=tr_mask,
        eval_ids=ev_ids,
        eval_mask=ev_mask,
        max_new_tokens=longest + 1,
        order=prompt_order(len(train), cfg.prompts_per_step, cfg.steps, seed),
        warm_state=warm_state,
        warm_seconds=warm_seconds,
        warm_cached=warm_cached,
    )


def prepare_seed(cfg: LabConfig, seed: int, *, cache_dir: Path | None) -> SeedContext:
    """Generate the splits and the warm-started weights of ``seed`` (cached by config hash)."""
    tok = build_tokenizer()
    train, held_out = make_splits(seed, cfg.n_train, cfg.n_eval, levels=cfg.level_table)
    cache = cache_dir / f"warm-{_cache_key(cfg, seed)}.pt" if cache_dir is not None else None
    start = time.perf_counter()
    if cache is not None and cache.exists():
        saved = torch.load(cache, map_location="cpu", weights_only=False)
        state, info = saved["state"], saved["info"]
        cached = True
        logger.info("seed %d: warm start loaded from %s", seed, cache)
    else:
        model = new_model(cfg, tok, seed).to(cfg.device)
        exclude = frozenset(train.prompts) | frozenset(held_out.prompts)
        logger.info(
            "seed %d: supervised warm start (at most %d steps of %d problems)",
            seed,
            cfg.warm_steps,
            cfg.warm_batch_size,
        )
        result = warm_start(
            model, tok, max_steps=cfg.warm_steps, batch_size=cfg.warm_batch_size, lr=cfg.warm_lr, seed=seed,
            target=cfg.warm_target, exclude=exclude, levels=cfg.warm_level_table,
        )  # fmt: skip
        info = {"steps": result.steps, "reached_target": result.reached_target, "probe_acc": result.probe_acc}
        state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        cached = False
        if cache is not None:
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_suffix(f".tmp{os.getpid()}")
            torch.save({"state": state, "info": info}, tmp)
            tmp.replace(cache)
    ctx = build_context(
        cfg, seed, train, held_out, state, warm_seconds=time.perf_counter() - start, warm_cached=cached
    )
    ctx.info.update(info)
    return ctx
