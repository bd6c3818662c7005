"""The launch checks: what coba-verl checks before Ray starts (and the trainer again in Ray).

`config_bridge` (the ``coba`` node -> `CobaConfig`, the veRL configurations refused); veRL 0.9.1's
own start-up conditions, refused in one line by `verl_start` (it holds the asynchronous modes'):
those of every trainer in `trainer_start`, ``separate_async``'s in `separate_async_start`, the
checkpoint engines whose modules import here in `checkpoint_engines`, each gated by `verl_code`'s
source digests; `mandatory_values` (veRL's ``???`` values the run reads); `preflight` (the driver's
files, model, priors and devices).
"""
