"""Test scaffolding: import stub (see vllm/__init__.py)."""


class TokensPrompt(dict):
    pass
