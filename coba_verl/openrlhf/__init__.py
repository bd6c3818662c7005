"""CoBA-RL for OpenRLHF 0.11.2: per-prompt rollout budgets in its GRPO, without a fork.

    python -m coba_verl.openrlhf.train <OpenRLHF's train_ppo_ray flags> --coba.strategy coba

Needs the ``openrlhf`` extra (OpenRLHF 0.11.2 with DeepSpeed 0.19, and vLLM on GPUs). Modules:
    train      the entry point: OpenRLHF's CLI with coba's flags and trainer.
    trainer    `CobaPPOTrainer`, the Ray actor class standing in for OpenRLHF's PPOTrainer.
    generator  `CobaSamplesGenerator`: one rollout request per prompt with its budget.
    groups     `CobaExperienceMaker`: OpenRLHF's group baselines over variable groups.
    checks     what is extended (checked on import) and what is refused.
"""

try:
    import openrlhf  # noqa: F401
except ModuleNotFoundError as err:
    raise ModuleNotFoundError(
        f'coba_verl.openrlhf needs OpenRLHF 0.11.2 ({err}): pip install -e ".[openrlhf]" (a clone) in an '
        "environment without veRL (docs/openrlhf.md)."
    ) from err

from coba_verl.openrlhf.checks import check_openrlhf_api  # noqa: E402

check_openrlhf_api()
