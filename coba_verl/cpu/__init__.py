"""A CPU backend for veRL 0.9's V1 trainer, so its real pipeline runs (and is tested) without GPUs.

Switched on with the ``coba_cpu=cpu`` config group (``+coba_cpu=cpu``, ``coba-verl train --cpu``,
or the tiny recipe in ``recipes/tiny_cpu``); off by default. Pieces, each through a veRL
extension point:

`platform`      veRL platform ``cpu`` (gloo, logical Ray ``GPU`` slots), `device` its torch module
`registration`  loaded by veRL in every process: platform, FSDP engine for ``cpu``, rollout ``hf``,
                checkpoint engine ``ray_object_store``
`rollout`       the ``hf`` rollout: transformers generation behind veRL's router
`workers`       veRL's trainer workers with a gloo-only process group (and the trainer mixin
                that swaps them in)
`checkpoint_engine`  ``ray_object_store``: ``separate_async``'s weights through Ray's object store
`launcher`      start-up settings and Ray counts

It needs veRL and torch only: the tiny recipe's task and model are `coba_verl.arithmetic`'s, and
the rollout's KV-cache decode loop is `coba_verl.decoding`'s.
"""

#: The platform name ``VERL_PLATFORM`` selects.
PLATFORM_NAME = "cpu"
#: The rollout name (``actor_rollout_ref.rollout.name``).
ROLLOUT_NAME = "hf"
#: The checkpoint engine that sends ``separate_async``'s weights (`checkpoint_engine`), named here
#: so that the launcher reads it without importing veRL before the platform is set.
CHECKPOINT_ENGINE_BACKEND = "ray_object_store"
