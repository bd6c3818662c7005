"""Test scaffolding: import stub (see flash_attn/__init__.py)."""
