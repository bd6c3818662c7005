"""Exact pass rates of the lab's prompts under the current model: one teacher-forced forward.

The lab's sampler (`coba_verl.arithmetic.model.sample`) draws each token from softmax(logits / T)
until ``<eos>`` or ``max_new_tokens``; the response is decoded with ``<pad>`` and ``<bos>`` dropped
(`decode_responses`, ``skip_special_tokens``) and scored by exact match (`verify`). The vocabulary
has no space, so ``strip`` changes nothing. A response of prompt x with answer c_1..c_L is
therefore correct exactly when its tokens, with the dropped ones D = {<pad>, <bos>} removed, are
c_1..c_L, followed by ``<eos>`` or by the ``max_new_tokens`` cut.

The main path, c_1..c_L then ``<eos>``, has probability

    P_main = prod_{j=1..L} pi(c_j | x, c_<j) * pi(<eos> | x, c_1..c_L).

Every other correct path leaves the main path at some position j in 0..L by a token of D (leaving
it by another character or an early ``<eos>`` can no longer decode to the answer), so together they
weigh at most

    bound = sum_{j=0..L} pi(c_1..c_j | x) * pi(D | x, c_1..c_j),

and the exact pass rate p satisfies P_main <= p <= P_main + bound. `exact_pass_rates` returns p =
P_main and the bound, both from one forward pass over ``<bos> x c_1..c_L <eos>``. The cut needs no
term of its own: the lab's ``max_new_tokens`` is the longest answer + 1 (`build_context`), so the
main path always fits, and a path cut before ``<eos>`` holds a token of D.

Answers with several correct strings are refused: a worked answer (it holds ``=``) is scored on its
final number only, so any working that ends in it counts (`coba_verl.arithmetic.task.verify`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from transformers import Qwen2ForCausalLM

from coba_verl.arithmetic.outcomes import trim_padding
from coba_verl.arithmetic.tokenizer import BOS, EOS, PAD, pad_rows
from coba_verl.decoding import positions
from coba_verl.refusal import CobaRefusal

__all__ = ["ExactRates", "exact_pass_rates", "dropped_tokens"]


@dataclass(frozen=True)
class ExactRates:
    """Per prompt: p = P_main, the exact pass rate up to ``bound`` (p <= true rate <= p + bound)."""

    p: np.ndarray  # (K,) float64
    bound: np.ndarray  # (K,) float64, the most the paths through a dropped token can add


def dropped_tokens(tok: Tokenizer) -> list[int]:
    """Ids the decoder drops from a response (``skip_special_tokens``) other than ``<eos>``: D."""
    return [tok.token_to_id(PAD), tok.token_to_id(BOS)]


def _check_single_answer(answers: list[str]) -> None:
    worked = [a for a in answers if "=" in a]
    if worked:
        raise CobaRefusal(
            f"exact pass rates need one correct string per answer; {len(worked)} answer(s) such as "
            f"{worked[0]!r} are worked (scored on the number after the last '='), so many strings "
            "are correct: the `worked` levels have no exact pass rate here."
        )


@torch.no_grad()
def exact_pass_rates(
    model: Qwen2ForCausalLM,
    tok: Tokenizer,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    answers: list[str],
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
) -> ExactRates:
    """p_i = P_main of each prompt and the bound on the rest (module doc), in one forward.

    Args:
        prompt_ids, prompt_mask: (K, P) left-padded ``<bos>prompt`` rows (`encode_prompts`).
        answers: (K,) gold answers, one correct string each.
        max_new_tokens: the sampler's cap; an answer that cannot fit before it (L + 1 > cap) has
            only the cut path c_1..c_L when L = cap (exact, bound 0), and p = 0 when L > cap.
        temperature: the sampler's (> 0).

    Raises:
        CobaRefusal: a worked answer, or a temperature that is not positive.
    """
    if not temperature > 0:
        raise CobaRefusal(f"temperature={temperature}: exact pass rates are for sampling (> 0).")
    answers = list(answers)
    _check_single_answer(answers)
    k = len(answers)
    if k == 0:
        return ExactRates(np.zeros(0), np.zeros(0))
    eos = tok.token_to_id(EOS)
    pad = tok.token_to_id(PAD)
    encoded = [e.ids for e in tok.encode_batch(answers, add_special_tokens=False)]
    lengths = np.asarray([len(e) for e in encoded])  # (K,) L_i
    resp, resp_mask = pad_rows([[*e, eos] for e in encoded], pad, left=False)  # (K, L+1)
    device = next(model.parameters()).device
    p_ids, p_mask = (t.to(device) for t in trim_padding(prompt_ids, prompt_mask))  # common left padding
    resp, resp_mask = resp.to(device), resp_mask.to(device)
    ids = torch.cat([p_ids, resp], 1)
    mask = torch.cat([p_mask, resp_mask], 1)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions(mask), use_cache=False).logits
    width = p_ids.shape[1]
    logp = F.log_softmax(logits[:, width - 1 : -1, :].float() / temperature, -1)  # (K, L+1, V)
    token_logp = torch.gather(logp, 2, resp[:, :, None]).squeeze(-1).double().cpu().numpy()  # (K, L+1)
    dropped = logp[:, :, dropped_tokens(tok)].exp().sum(-1).double().cpu().numpy()  # (K, L+1) pi(D | c_<j)
    p = np.zeros(k)
    bound = np.zeros(k)
    for i, length in enumerate(lengths):
        prefix = np.concatenate([[0.0], np.cumsum(token_logp[i, :length])])  # log pi(c_1..c_j), j = 0..L
        if length + 1 <= max_new_tokens:
            p[i] = float(np.exp(prefix[length] + token_logp[i, length]))  # ... then <eos>
            bound[i] = float(np.sum(np.exp(prefix) * dropped[i, : length + 1]))
        elif length == max_new_tokens:  # only the cut path c_1..c_L: no room for a token of D
            p[i] = float(np.exp(prefix[length]))
        # longer than the cap: never correct (p = 0, bound = 0)
    return ExactRates(p=p, bound=bound)
