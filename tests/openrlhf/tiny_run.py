"""Test scaffolding: a tiny model, prompt set and reward on disk, and the CPU launch of a real OpenRLHF run.

    prompt_id  input   label    reward of a completion
    10         "1+1="  always   1                          (p = 1)
    11         "9*9="  never    0                          (p = 0)
    12         "2+3="  even     1 iff its length is even   (p about 1/2)
    13         "7-4="  even     likewise

`launch` runs ``python -m coba_verl.openrlhf.train`` (or OpenRLHF's own CLI) in a subprocess whose
PYTHONPATH holds the OpenRLHF folder and ``tests/openrlhf/scaffold`` (vLLM / flash-attn import stubs,
CUDA shims, stand-in rollout actor). Every round holds the four prompts: M = 4, n = 4.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OPENRLHF_SITE = ROOT / ".openrlhf-site"
SCAFFOLD = Path(__file__).resolve().parent / "scaffold"

ROWS = [
    {"prompt_id": 10, "input": "1+1=", "label": "always"},
    {"prompt_id": 11, "input": "9*9=", "label": "never"},
    {"prompt_id": 12, "input": "2+3=", "label": "even"},
    {"prompt_id": 13, "input": "7-4=", "label": "even"},
]

REWARD = '''
"""Reward of the CPU tests: by label, on the completion after the prompt (special tokens dropped)."""


def reward_func(queries, prompts, labels):
    (query,), (prompt,), (label,) = queries, prompts, labels
    completion = query[len(prompt):].replace("<eos>", "").replace("<pad>", "")
    score = 1.0 if label == "always" or (label == "even" and len(completion) % 2 == 0) else 0.0
    return {"rewards": score, "scores": score, "extra_logs": {}}
'''


def write_tiny_model(folder: Path) -> Path:
    """A two-layer Qwen2 (hidden 32) with a character tokenizer, saved as a HF model folder."""
    import torch
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    specials = ["<pad>", "<eos>", "<unk>"]
    chars = list("0123456789+-*=abcdefghijklmnopqrstuvwxyz ")
    vocab = {tok: i for i, tok in enumerate(specials + chars)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )
    config = Qwen2Config(
        vocab_size=len(vocab),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        tie_word_embeddings=True,
        pad_token_id=vocab["<pad>"],
        eos_token_id=vocab["<eos>"],
        bos_token_id=vocab["<eos>"],
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = vocab["<pad>"]
    model.generation_config.eos_token_id = vocab["<eos>"]
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def write_inputs(folder: Path, rows: list[dict] = ROWS) -> dict[str, Path]:
    """Model folder, prompt set (jsonl) and reward file under ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "prompts.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    reward = folder / "reward.py"
    reward.write_text(REWARD)
    model = folder / "model"
    if not (model / "config.json").exists():
        write_tiny_model(model)
    return {"model": model, "data": data, "reward": reward}


def openrlhf_flags(
    inputs: dict[str, Path], out: Path, *, episodes: int = 3, estimator: str = "group_norm"
) -> list[str]:
    """OpenRLHF's flags for a CPU GRPO run over the four prompts: one round (4 prompts x 4) per step."""
    return [
        "--actor.model_name_or_path", str(inputs["model"]),
        "--reward.remote_url", str(inputs["reward"]),
        "--data.prompt_dataset", str(inputs["data"]),
        "--data.input_key", "input",
        "--data.label_key", "label",
        "--data.max_len", "24",
        "--rollout.max_new_tokens", "6",
        "--rollout.n_samples_per_prompt", "4",
        "--rollout.batch_size", "4",
        "--rollout.micro_batch_size", "4",
        "--train.batch_size", "16",
        "--train.micro_batch_size", "8",
        "--train.num_episodes", str(episodes),
        "--train.seed", "0",
        "--actor.num_nodes", "1",
        "--actor.num_gpus_per_node", "1",
        "--vllm.num_engines", "1",
        "--vllm.tensor_parallel_size", "1",
        "--algo.kl.init_coef", "0",
        "--algo.advantage.estimator", estimator,
        "--actor.adam.lr", "1e-3",
        "--ds.zero_stage", "0",
        "--ds.attn_implementation", "eager",
        "--ckpt.path", str(out / "ckpt"),
        "--ckpt.output_dir", str(out / "final"),
        "--ckpt.save_steps", "1",
        "--logger.tensorboard_dir", str(out / "tb"),
    ]  # fmt: skip


def launch(
    args: list[str],
    *,
    module: str = "coba_verl.openrlhf.train",
    timeout: float = 600,
    cwd: Path | None = None,
):
    """``python -m <module> <args>`` with the CPU scaffolding; the CompletedProcess (text output)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SCAFFOLD), str(OPENRLHF_SITE), str(ROOT)])
    env.update(
        RAY_DEDUP_LOGS="0",
        TOKENIZERS_PARALLELISM="false",
        OMP_NUM_THREADS="1",
        RAY_ENABLE_UV_RUN_RUNTIME_ENV="0",
        WANDB_MODE="disabled",
    )
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        env=env,
        cwd=cwd or ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
