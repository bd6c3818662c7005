"""The trainer hooks: coba-verl's code inside veRL's trainers, step by step.

`trainer` (`CobaBudgets` and the registered V1 trainers; `registration` is the ``verl.plugins``
entry point), `replay_buffer` / `async_replay_buffer`, `session_fates`, `step_counts`, `advantage`,
`dataloader`, `classic`, `sessions`, `progress`, and `verl_guards` (the veRL code they rely on,
checked).
"""
