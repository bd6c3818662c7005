"""The package's toy task: generated arithmetic a tiny Qwen2 really learns, in one home.

Used by the CPU lab (`coba_verl.lab`), the tiny veRL recipe (`tiny`, ``recipes/tiny_cpu``) and
the TRL example (``examples/trl_grpo_coba.py``, through `coba_verl.arithmetic.hf_dataset`):

`task`        problems by level, exact-answer scoring, the training / held-out splits
`tokenizer`   one token per character: the character vocabulary (lab, TRL) and its ChatML
              form for veRL
`model`       the tiny Qwen2 (`ModelSpec`), batched sampling, response log-probs
`warmstart`   the supervised fit that brings a random model to a probe accuracy
`tiny`        the tiny veRL recipe's parquet files, warm-started model and reward
              (``python -m coba_verl.arithmetic.tiny``)
`hf_dataset`  a split as a HuggingFace dataset and an exact-answer reward of completions (TRL)

Needs torch, transformers and tokenizers (pandas for `tiny`, datasets for `hf_dataset`); not veRL.
"""
