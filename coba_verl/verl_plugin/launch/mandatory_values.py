"""veRL's mandatory values (omegaconf's ``???``) that a launch leaves unset, refused before Ray.

veRL 0.9.1's config marks a value no default fits with ``???``: ``actor_rollout_ref.rollout.name``
(``trainer/config/rollout/rollout.yaml:5``), the rollout engine, is one. Composing such a config
succeeds, and veRL's ``validate_config`` does not read it, so on GPUs the launch goes on until a
worker inside Ray reads it and stops with omegaconf's ``MissingMandatoryValue``; on CPU the first
check that reads it ends in that traceback. `check_mandatory_values` names every such value the
run's trainer reads, with what fits each, in one refusal before Ray starts.

"Reads" is decided from veRL's source: every ``???`` of the composed config counts, except under
a node that veRL 0.9.1 reads only when a switch is on (`UNREAD`), where the switch is off:

- ``reward.reward_model`` while ``reward.reward_model.enable`` is false: its ``rollout.name``
  (``reward/reward.yaml:40``) is read only to serve an enabled reward model (the reward loop's
  manager ``experimental/reward_loop/reward_loop.py:281-303`` and workers ``:127``, ``:150``,
  ``:233``); ``run_ppo`` reads its ``full_determinism`` only when it is enabled (``main_ppo.py:47``),
  and the trainers read its ``enable``, ``enable_resource_pool``, ``nnodes`` and
  ``n_gpus_per_node`` (``trainer_base.py:198-199, 823-834``, ``main_ppo_v0.py:75-85``), never
  ``???`` in veRL's yaml. ``to_container(resolve=True)`` (``TaskRunnerV1.run``) and
  ``OmegaConf.resolve`` leave a ``???`` as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from coba_verl.cpu import ROLLOUT_NAME as CPU_ROLLOUT_NAME
from coba_verl.refusal import CobaRefusal

__all__ = [
    "FITS",
    "UNREAD",
    "check_mandatory_values",
    "missing_values",
    "named_when_read",
    "unset_mandatory_values",
]


class Fit(NamedTuple):
    """What fits a mandatory value: in words, and one value for the example override."""

    what: str
    example: str


class Unread(NamedTuple):
    """A config node veRL does not read while ``unread(config)`` holds (why: the module docstring)."""

    node: str
    unread: Callable[[DictConfig], bool]


#: What fits each mandatory value of veRL 0.9.1's config. veRL's own engines are its rollout
#: registry's (``workers/rollout/base.py:89-93``); the CPU backend registers ``hf``.
FITS: dict[str, Fit] = {
    "actor_rollout_ref.rollout.name": Fit(
        f"the rollout engine: vllm or sglang on GPUs, {CPU_ROLLOUT_NAME} on CPU with coba-verl train --cpu",
        "vllm",
    ),
    "reward.reward_model.rollout.name": Fit("the engine serving the reward model: vllm or sglang", "vllm"),
}
#: Said of a mandatory value `FITS` does not know.
UNKNOWN_FIT = "a value veRL's config leaves to the launch line"


def _reward_model_off(config: DictConfig) -> bool:
    return not bool(OmegaConf.select(config, "reward.reward_model.enable", default=False))


#: Nodes whose ``???`` values veRL 0.9.1 does not read, and when.
UNREAD: tuple[Unread, ...] = (Unread("reward.reward_model", _reward_model_off),)


def missing_values(config: DictConfig) -> list[str]:
    """The dotted key of every ``???`` value of ``config``, in the config's order (lists as ``key[i]``).

    Read from the unresolved container, so that no interpolation is resolved on the way.
    """
    found: list[str] = []

    def walk(value: Any, path: str) -> None:
        if isinstance(value, dict):
            for key, child in value.items():
                walk(child, f"{path}.{key}" if path else str(key))
        elif isinstance(value, list):
            for i, child in enumerate(value):
                walk(child, f"{path}[{i}]")
        elif value == MISSING:
            found.append(path)

    walk(OmegaConf.to_container(config, resolve=False), "")
    return found


def _under(key: str, node: str) -> bool:
    return key == node or key.startswith(f"{node}.") or key.startswith(f"{node}[")


def unset_mandatory_values(config: DictConfig) -> list[str]:
    """`missing_values` that this run's trainer reads: those under an `UNREAD` node left out
    while its switch is off."""
    unread = [u.node for u in UNREAD if u.unread(config)]
    return [key for key in missing_values(config) if not any(_under(key, node) for node in unread)]


def check_mandatory_values(config: DictConfig) -> None:
    """Refuse a config that leaves a mandatory value the trainer reads unset (`unset_mandatory_values`).

    Raises:
        CobaRefusal: one line naming every such key, what fits each (`FITS`) and an override.
    """
    keys = unset_mandatory_values(config)
    if not keys:
        return
    named = "; ".join(f"{key} ({FITS[key].what if key in FITS else UNKNOWN_FIT})" for key in keys)
    examples = " ".join(f"{key}={FITS[key].example}" for key in keys if key in FITS)
    count = "1 mandatory value" if len(keys) == 1 else f"{len(keys)} mandatory values"
    raise CobaRefusal(
        f"the launch leaves {count} of veRL's config unset (???) that this run reads: {named}. veRL "
        f"would stop on {'it' if len(keys) == 1 else 'the first'} with omegaconf's MissingMandatoryValue, "
        "on GPUs only after Ray has started. "
        "Set each on the launch line" + (f", e.g. {examples}." if examples else ".")
    )


@contextmanager
def named_when_read(config: DictConfig) -> Iterator[None]:
    """Turn a ``MissingMandatoryValue`` raised inside into `check_mandatory_values`' refusal, which
    names every unset value; one it does not name (an `UNREAD` node's) is raised as it was."""
    try:
        yield
    except MissingMandatoryValue:
        check_mandatory_values(config)
        raise
