"""CPU lab: a tiny Qwen2 that really learns generated arithmetic with GRPO, under each allocation strategy.

Entry points: ``coba-verl lab`` / ``python -m coba_verl.lab`` (`coba_verl.lab.cli.main`) and
`coba_verl.lab.experiment.run_lab` for programmatic use. The allocator is the production
`coba_verl.core.BudgetAllocator`; advantages and the policy loss are veRL's
(`verl.trainer.ppo.core_algos`). See ``docs/lab.md``.
"""
