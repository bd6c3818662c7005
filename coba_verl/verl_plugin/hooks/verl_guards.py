"""The veRL 0.9.1 code the trainer hooks rely on, checked so that a veRL change never alters them silently.

Two kinds of reliance, two checks:

- methods of veRL's V1 trainers that `CobaBudgets` extends (`EXTENDED_METHODS`): their names and
  parameters, checked at import for each trainer class (`check_verl_api`); a renamed hook would
  otherwise never be called;
- methods of veRL's replay buffers that the CoBA buffers override, re-implement or call
  (`VERL_BUFFER_SHA256`): the sha256 of each method's source (`source_sha256`), compared when a
  buffer is built (`verl_changes`); the buffer refuses or falls back to veRL's own sampling.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Iterable
from typing import Any

from verl.trainer.ppo.v1 import replay_buffer as verl_replay_buffer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from coba_verl.framework_api import check_api

#: The veRL methods `CobaTrainer` extends and the parameters it calls them with (veRL 0.9.1).
EXTENDED_METHODS: dict[str, tuple[str, ...]] = {
    "_init_dataloader": ("self",),
    "_init_resource_pool_mgr": ("self",),
    "_build_replay_buffer": ("self",),
    "_load_checkpoint": ("self",),
    "_reissue_inflight_prompts": ("self", "partition_id"),
    "_next_train_batch": ("self", "num_prompts"),
    "_submit_batch_to_rollout": ("self", "batch"),
    "_compute_advantage": ("self", "batch", "metrics"),
    "step": ("self", "metrics", "timing_raw"),
    "_compute_metrics": ("self", "batch", "metrics", "timing_raw", "global_steps", "epoch"),
    "on_validate_begin": ("self",),
    "on_validate_end": ("self",),
}


def check_verl_api(base: type = PPOTrainerSync) -> None:
    """Refuse to load against a veRL whose trainer lacks a method we extend, or changed its parameters.

    A renamed hook would otherwise be silently never called: budgets would stop reaching the
    engine, or the tracker would stop learning, with no error.

    Raises:
        FrameworkMismatch: (`coba_verl.framework_api.check_api`) naming the method, the signature
            found and the one expected.
    """
    check_api("veRL", "verl", "0.9.1", {(base, name): params for name, params in EXTENDED_METHODS.items()})


def source_sha256(method: Callable[..., Any]) -> str | None:
    """sha256 of a method's source text, or None where Python cannot read it (no ``.py`` file)."""
    try:
        return hashlib.sha256(inspect.getsource(method).encode()).hexdigest()
    except (OSError, TypeError):
        return None


#: sha256 of ``inspect.getsource`` of each veRL 0.9.1 method the CoBA buffers override or
#: re-implement (`verl_changes`), by ``"<class>.<method>"`` in ``verl/trainer/ppo/v1/replay_buffer.py``.
VERL_BUFFER_SHA256: dict[str, str] = {
    # overridden: every group cleared untrained passes here, so the tracker sees it (:241-259)
    "ReplayBuffer._clear_groups": "46adae90d465f15a4bd3ff1154da6dba5c27a8288030e11aeb2bd477e8e87b42",
    # re-implemented by CobaReplayBuffer._sample_rollouts (:421-511), with its eviction reasons (:318-336)
    "ReplayBuffer.sample": "cdcecebeb7f0b44e9726b62e208fb6821023591d8b91b0a9ad56750a96363e43",
    "ReplayBuffer._terminal_eviction_reasons": "4ffdb3bccfea999a7f8a6b029ecc5124a91336b699f6fd43156c7d890f1b5836",  # noqa: E501
    # re-implemented by _take: oldest first by submission step (:383-392)
    "ReplayBuffer._select_prompt_uids": "d54921984c037a787c87aed3f59301fcbaafc66c2871a845ad37bad5104628ab",
    # re-implemented by CobaReplayBufferAsync._sample_rollouts (:564-613), its staleness wait (:541-556)
    "ReplayBufferAsync.sample": "d31f3d3955ec5cfd944e628eb8468b97854feb4363b74f0b1617fbce5344ff77",
    "ReplayBufferAsync.wait_for_sampleable": "5590a1b06f671763968213e1353f5bd93a64a342b620762f9ec9b2ecc8e5db56",  # noqa: E501
    "ReplayBufferAsync._has_enough_samples": "42cfe96fe02c45680c9aa7b9101f51054bf0c142cd7005cf89f243bb7aafdbdb",  # noqa: E501
    # overridden by CobaReplayBufferAsync (failed groups with enough finished sessions train), whose
    # staleness test for them mirrors _stale_terminal_keys (:520-529)
    "ReplayBufferAsync._terminal_eviction_reasons": "dee4779773543c4cb0f6a965fb127c404d3c08599265c2d13927205d37c740a2",  # noqa: E501
    "ReplayBufferAsync._stale_terminal_keys": "a71c810a9e452911e8d43a008879de5101c421bd52d00383c9e1d208212cced4",  # noqa: E501
    # called by both counted samplings: what is ready (:338-346), evicting with its metrics (:348-381,
    # and the module function :79-95), the batch of the chosen groups (:394-406), the metadata
    # refresh (:214-239) and the poll wait (:408-419)
    "ReplayBuffer._sampleable_terminal_keys": "9328fc8437504a1a236f46b249c3e50c1e170b81b60ecd39f2ddc7b8616fb76e",  # noqa: E501
    "ReplayBuffer._evict_terminal_groups": "c2c224967f20c54b953aa3fd0506cd83984ede7c51b72dd092031e6e68deebbb",  # noqa: E501
    "_accumulate_eviction_metrics": "2261ad5e8c69b53cf3662c90a5008d952beffe8713e1aeada26135fbd37f0367",
    "ReplayBuffer._materialize_batch": "f9fe1d149509051822a4579c6d565ed424a489a8d00e092f3b93bf799cdfcbda",
    "ReplayBuffer._sync_metadata_from_transfer_queue": "489dc320fdce58c7a104f38f29b2ea9dd00c7b6d74f5eeb1a4e529f479999e22",  # noqa: E501
    "ReplayBuffer._wait_for_next_poll": "10088bf03da693830d23be51540b04ad3e21e34566f70cbe8863f2867873f8cd",
    # DAPO's rule (a group with more than one session and one metric value has no spread, :261-315),
    # which CobaReplayBufferAsync._failed_without_spread applies to the failed groups it keeps
    "ReplayBuffer._dapo_filtered_keys": "790dfb4e7ffb4d1b6d05f340b7d0180b6d093ce3b64f6ed63e7d0480a2852d8a",
}

#: The veRL helpers both counted samplings call (`VERL_BUFFER_SHA256`); one that changed means veRL's
#: own sampling, as for a changed method they re-implement.
VERL_CALLED: tuple[str, ...] = (
    "ReplayBuffer._sampleable_terminal_keys",
    "ReplayBuffer._evict_terminal_groups",
    "_accumulate_eviction_metrics",
    "ReplayBuffer._materialize_batch",
    "ReplayBuffer._sync_metadata_from_transfer_queue",
    "ReplayBuffer._wait_for_next_poll",
)


def verl_changes(names: Iterable[str]) -> list[str]:
    """The names of ``names`` (``"<class>.<method>"``, or a module function's name) whose veRL code is
    missing or whose source is not the one `VERL_BUFFER_SHA256` holds (veRL 0.9.1's), read from veRL's
    ``replay_buffer`` module at call time."""
    changed = []
    for name in names:
        owner, _, method = name.rpartition(".")
        holder = getattr(verl_replay_buffer, owner, None) if owner else verl_replay_buffer
        function = vars(holder).get(method) if holder is not None else None
        if function is None or source_sha256(function) != VERL_BUFFER_SHA256[name]:
            changed.append(name)
    return changed
