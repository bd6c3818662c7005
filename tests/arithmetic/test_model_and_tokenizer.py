"""Tokenizer round trip, KV-cache sampling against a cache-free reference, padding invariance."""

from __future__ import annotations

import torch

from coba_verl.arithmetic.model import ModelSpec, build_model, response_logprobs, sample
from coba_verl.arithmetic.tokenizer import (
    ALPHABET,
    BOS,
    EOS,
    PAD,
    build_tokenizer,
    decode_responses,
    encode_prompts,
)

SPEC = ModelSpec(hidden_size=32, num_layers=2, intermediate_size=64)


def _model(seed: int = 0):
    tok = build_tokenizer()
    ids = {name: tok.token_to_id(name) for name in (PAD, BOS, EOS)}
    model = build_model(
        SPEC, tok.get_vocab_size(), pad_id=ids[PAD], bos_id=ids[BOS], eos_id=ids[EOS], seed=seed
    )
    return tok, model.eval(), ids


def test_tokenizer_has_one_token_per_character_and_three_specials() -> None:
    tok = build_tokenizer()
    assert tok.get_vocab_size() == len(ALPHABET) + 3
    assert [tok.token_to_id(s) for s in (PAD, BOS, EOS)] == [0, 1, 2]
    enc = tok.encode("123*45=", add_special_tokens=False)
    assert len(enc.ids) == 7
    assert tok.decode(enc.ids) == "123*45="


def test_prompts_are_left_padded_after_bos() -> None:
    tok = build_tokenizer()
    ids, mask = encode_prompts(tok, ["1+2=", "123*45="])
    assert ids.shape == (2, 8)
    assert mask[0].tolist() == [0, 0, 0, 1, 1, 1, 1, 1]
    assert ids[0, 3].item() == tok.token_to_id(BOS) and ids[1, 0].item() == tok.token_to_id(BOS)
    assert (ids[0, :3] == tok.token_to_id(PAD)).all()


def test_decode_stops_at_eos_and_drops_masked_tokens() -> None:
    tok = build_tokenizer()
    t = tok.token_to_id
    resp = torch.tensor([[t("4"), t("2"), t(EOS), t(PAD)], [t("7"), t(EOS), t(PAD), t(PAD)]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    assert decode_responses(tok, resp, mask) == ["42", "7"]


def test_greedy_sampling_with_kv_cache_matches_recomputing_every_prefix() -> None:
    tok, model, ids = _model()
    prompts, mask = encode_prompts(tok, ["1+2=", "34+5=", "123*45="])
    resp, rmask = sample(
        model, prompts, mask, max_new_tokens=5, eos_id=ids[EOS], pad_id=ids[PAD],
        generator=torch.Generator().manual_seed(0), temperature=0.0,
    )  # fmt: skip
    for i in range(prompts.shape[0]):
        seq = prompts[i][mask[i].bool()].tolist()  # unpadded prompt
        for t in range(int(rmask[i].sum())):
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([seq])).logits[0, -1]
            assert int(logits.argmax()) == int(resp[i, t])
            seq.append(int(resp[i, t]))


def test_sampling_is_reproducible_for_a_generator_seed() -> None:
    tok, model, ids = _model()
    prompts, mask = encode_prompts(tok, ["1+2=", "34+5="] * 8)
    kw = {"max_new_tokens": 6, "eos_id": ids[EOS], "pad_id": ids[PAD]}
    a = sample(model, prompts, mask, generator=torch.Generator().manual_seed(5), **kw)
    b = sample(model, prompts, mask, generator=torch.Generator().manual_seed(5), **kw)
    c = sample(model, prompts, mask, generator=torch.Generator().manual_seed(6), **kw)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])


def test_response_mask_covers_tokens_up_to_and_including_eos() -> None:
    tok, model, ids = _model()
    prompts, mask = encode_prompts(tok, ["9+9="] * 64)
    resp, rmask = sample(
        model, prompts, mask, max_new_tokens=4, eos_id=ids[EOS], pad_id=ids[PAD],
        generator=torch.Generator().manual_seed(1),
    )  # fmt: skip
    for r, m in zip(resp.tolist(), rmask.tolist(), strict=True):
        n = sum(m)
        assert m == [1] * n + [0] * (len(m) - n)
        if ids[EOS] in r[:n]:
            assert r.index(ids[EOS]) == n - 1
        assert all(x == ids[PAD] for x in r[n:])


def test_log_probs_do_not_depend_on_left_padding() -> None:
    tok, model, ids = _model()
    answer = torch.tensor([[tok.token_to_id("3"), ids[EOS]]])
    amask = torch.ones_like(answer)
    alone = encode_prompts(tok, ["1+2="])
    padded = encode_prompts(tok, ["1+2=", "123*45="])
    lp_alone = response_logprobs(model, *alone, answer, amask)
    lp_padded = response_logprobs(model, padded[0][:1], padded[1][:1], answer, amask)
    torch.testing.assert_close(lp_alone, lp_padded, atol=1e-5, rtol=1e-5)


def test_pad_rows_pads_on_the_named_side_and_masks_only_tokens():
    from coba_verl.arithmetic.tokenizer import pad_rows

    ids, mask = pad_rows([[5, 6, 7], [8]], pad=0, left=True)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    ids, mask = pad_rows([[5, 6, 7], [8]], pad=0, left=False)
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0]] and mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert ids.dtype == mask.dtype == torch.long
