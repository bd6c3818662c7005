"""The arithmetic task's tokenizers, built from scratch (nothing is downloaded): one token per character.

`build_tokenizer`          the character vocabulary (``tokenizers.Tokenizer``, WordLevel): three
                           special tokens and the task's 14 characters. The lab encodes with it.
`transformers_tokenizer`   the same vocabulary and ids as a transformers tokenizer that prepends
                           ``<bos>``, left-padded: what TRL's ``GRPOTrainer`` takes.
`chat_tokenizer`           the tiny veRL recipe's: byte-level, one token per byte, with ChatML's
                           special tokens and a chat template that renders a prompt exactly as
                           the lab encodes it. veRL treats a ``qwen2`` model as ChatML and needs
                           ``"\\n"`` and ``<|im_end|>`` as single tokens (its continuous-token
                           builder), and transformers loads ``Qwen2Tokenizer`` for such a folder,
                           which the character vocabulary is not.

The character vocabulary and the byte-level one differ only in their ids; each stays as it is
because published results rest on it (the lab's tables and the TRL example on the first, the
tiny recipe's measurements on the second).

    "<bos>47*8=" -> [1, 7, 10, 4, 11, 13]      (ids depend on the trained vocabulary)
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from tokenizers.processors import TemplateProcessing
from transformers import PreTrainedTokenizerFast

__all__ = [
    "PAD",
    "BOS",
    "EOS",
    "ALPHABET",
    "build_tokenizer",
    "chat_tokenizer",
    "decode_responses",
    "encode_prompts",
    "pad_rows",
    "transformers_tokenizer",
]

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


def transformers_tokenizer() -> PreTrainedTokenizerFast:
    """`build_tokenizer`'s vocabulary as a transformers tokenizer that prepends ``<bos>``, left-padded.

    ``"47*8="`` encodes to the ids `encode_prompts` gives: ``[<bos>, 4, 7, *, 8, =]``.
    """
    tok = build_tokenizer()
    tok.post_processor = TemplateProcessing(single=f"{BOS} $A", special_tokens=[(BOS, tok.token_to_id(BOS))])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD, padding_side="left"
    )


#: `chat_tokenizer`'s special tokens: the task's three, then ChatML's.
CHAT_SPECIAL_TOKENS = [PAD, BOS, EOS, "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
#: Renders ``[{"role": "user", "content": "47*8="}]`` as ``"<bos>47*8="``, the lab's prompt layout.
CHAT_TEMPLATE = "{% for message in messages %}{{ '<bos>' + message['content'] }}{% endfor %}"


def chat_tokenizer() -> PreTrainedTokenizerFast:
    """The tiny veRL recipe's tokenizer: byte-level BPE without merges (one token per byte), the
    `CHAT_SPECIAL_TOKENS` and `CHAT_TEMPLATE`.

    ``[{"role": "user", "content": "47*8="}]`` -> ``"<bos>47*8="`` -> ``[1, 25, 28, 15, 29, 34]``.
    """
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=len(alphabet) + len(CHAT_SPECIAL_TOKENS),  # no room for merges: one token per byte
        special_tokens=CHAT_SPECIAL_TOKENS,
        initial_alphabet=alphabet,
        show_progress=False,
    )
    backend.train_from_iterator([ALPHABET + "\n"], trainer=trainer)  # and the newline veRL looks up
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token=PAD, bos_token=BOS, eos_token=EOS)
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def encode_prompts(tok: Tokenizer, prompts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Encode ``<bos> + prompt`` for each prompt, left-padded to a common length.

    Returns:
        input_ids: (N, P) int64, ``<pad>`` on the left.
        attention_mask: (N, P) int64, 0 on padding.
    """
    pad, bos = tok.token_to_id(PAD), tok.token_to_id(BOS)
    rows = [[bos, *e.ids] for e in tok.encode_batch(list(prompts), add_special_tokens=False)]
    return pad_rows(rows, pad, left=True)


def pad_rows(rows: Sequence[Sequence[int]], pad: int, *, left: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Token rows padded with ``pad`` to the longest (on the left or the right): (N, T) int64 ids and
    the (N, T) int64 mask, 1 on tokens; built as lists and converted once (the warm start pads two
    batches a step)."""
    width = max(len(r) for r in rows)
    padded, masks = [], []
    for r in rows:
        fill = width - len(r)
        padded.append([pad] * fill + list(r) if left else list(r) + [pad] * fill)
        masks.append([0] * fill + [1] * len(r) if left else [1] * len(r) + [0] * fill)
    return torch.tensor(padded, dtype=torch.long), torch.tensor(masks, dtype=torch.long)


def decode_responses(tok: Tokenizer, response_ids: torch.Tensor, response_mask: torch.Tensor) -> list[str]:
    """Decode generated tokens (R, T) up to, excluding, ``<eos>``; masked positions are dropped."""
    eos = tok.token_to_id(EOS)
    out: list[str] = []
    for ids, m in zip(response_ids.tolist(), response_mask.tolist(), strict=True):
        kept = [t for t, keep in zip(ids, m, strict=True) if keep and t != eos]
        out.append(tok.decode(kept, skip_special_tokens=True))
    return out
