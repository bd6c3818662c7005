"""A character-level tokenizer for the arithmetic task, built from scratch with ``tokenizers``.

Every character is one token (a WordLevel model over single characters), plus three special
tokens. Nothing is downloaded: the vocabulary is trained on the task's own alphabet.

    "<bos>47*8=" -> [1, 7, 10, 4, 11, 13]      (ids depend on the trained vocabulary)
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

__all__ = ["PAD", "BOS", "EOS", "ALPHABET", "build_tokenizer", "encode_prompts", "decode_responses"]

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
ALPHABET = "0123456789+-*="


def build_tokenizer() -> Tokenizer:
    """Train a WordLevel tokenizer whose tokens are ``<pad> <bos> <eos>`` and the task's characters."""
    tok = Tokenizer(models.WordLevel(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    trainer = trainers.WordLevelTrainer(special_tokens=[PAD, BOS, EOS], min_frequency=1, show_progress=False)
    tok.train_from_iterator(list(ALPHABET), trainer=trainer)
    return tok


def encode_prompts(tok: Tokenizer, prompts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Encode ``<bos> + prompt`` for each prompt, left-padded to a common length.

    Returns:
        input_ids: (N, P) int64, ``<pad>`` on the left.
        attention_mask: (N, P) int64, 0 on padding.
    """
    pad, bos = tok.token_to_id(PAD), tok.token_to_id(BOS)
    rows = [[bos, *e.ids] for e in tok.encode_batch(list(prompts), add_special_tokens=False)]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = torch.tensor(r)
        mask[i, width - len(r) :] = 1
    return ids, mask


def decode_responses(tok: Tokenizer, response_ids: torch.Tensor, response_mask: torch.Tensor) -> list[str]:
    """Decode generated tokens (R, T) up to, excluding, ``<eos>``; masked positions are dropped."""
    eos = tok.token_to_id(EOS)
    out: list[str] = []
    for ids, m in zip(response_ids.tolist(), response_mask.tolist(), strict=True):
        kept = [t for t, keep in zip(ids, m, strict=True) if keep and t != eos]
        out.append(tok.decode(kept, skip_special_tokens=True))
    return out
