"""The launch checks: what coba-verl checks before Ray starts (and the trainer again in Ray).

`config_bridge` (the ``coba`` node -> `CobaConfig`, the veRL configurations refused), `verl_start`,
`trainer_start` and `separate_async_start` (veRL 0.9.1's own start-up conditions, each gated by
`verl_code`'s source digest), `preflight` (the driver's files, model, priors and devices).
"""
