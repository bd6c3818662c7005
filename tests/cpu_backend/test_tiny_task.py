"""The tiny recipe's tokenizer and reward: what veRL's Qwen path and the lab's warm start need."""

from __future__ import annotations

from coba_verl.cpu.tiny import build_tokenizer, compute_score
from coba_verl.lab.tokenizer import BOS, encode_prompts


def test_chat_template_renders_a_prompt_as_the_lab_encodes_it():
    tok = build_tokenizer()
    ids = tok.apply_chat_template([{"role": "user", "content": "473*58="}], add_generation_prompt=True)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids  # transformers 5 returns an encoding
    lab_ids, _ = encode_prompts(tok.backend_tokenizer, ["473*58="])
    assert list(ids) == lab_ids[0].tolist()
    assert ids[0] == tok.convert_tokens_to_ids(BOS) and len(ids) == 1 + len("473*58=")  # a token a character


def test_tokens_verl_qwen_builder_needs_are_single_tokens():
    tok = build_tokenizer()
    assert len(tok.encode("\n", add_special_tokens=False)) == 1
    assert "<|im_end|>" in tok.get_vocab()
    answer = tok.encode("376", add_special_tokens=False) + [tok.eos_token_id]
    assert tok.decode(answer, skip_special_tokens=True) == "376"


def test_reward_is_one_iff_the_response_is_the_answer():
    assert compute_score("coba_arithmetic", "376", "376") == 1.0
    assert compute_score("coba_arithmetic", " 376 ", "376") == 1.0
    assert compute_score("coba_arithmetic", "3760", "376") == 0.0
