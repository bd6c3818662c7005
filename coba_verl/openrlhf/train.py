"""``python -m coba_verl.openrlhf.train``: OpenRLHF's ``openrlhf.cli.train_ppo_ray`` with CoBA budgets.

An OpenRLHF launch command changes one word::

    python -m openrlhf.cli.train_ppo_ray   --rollout.n_samples_per_prompt 8 ...
    python -m coba_verl.openrlhf.train     --rollout.n_samples_per_prompt 8 ... --coba.strategy coba

``--rollout.n_samples_per_prompt`` becomes the mean budget per prompt. The ``--coba.<field>`` flags
are `CobaConfig`'s fields (``--coba.min_rollouts 2 --coba.max_rollouts 32``, ...) plus
``--coba.id_key`` (default ``prompt_id``), the prompt-dataset column of stable prompt ids. Every
other flag goes to OpenRLHF's own parser, which runs unmodified: its argument checks, then
`train` with coba-verl's trainer in place of ``PPOTrainer``. A refused setting stops the launch
before Ray starts, with one line naming the flag (exit 2).

A checkpoint written for other prompts or another model (``--ckpt.load_enable``) cannot be checked
before Ray: OpenRLHF reads its ``client_states`` in the trainer actor's ``fit``, from the policy
actors' DeepSpeed checkpoint, once the models are up, and the prompts it is checked against are
the rows of OpenRLHF's `PromptDataset`. The `ResumeMismatch` raised there reaches this process
inside Ray's task error, and is printed as one line as well, ``coba-verl: <message>`` (exit 2).
"""

from __future__ import annotations

import argparse
import runpy
import sys
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from coba_verl.core import CobaConfig
from coba_verl.openrlhf.checks import COBA_FLAG_PREFIX, DEFAULT_ID_KEY, check_args, openrlhf_mismatch
from coba_verl.refusal import exit_on_refusal

__all__ = ["main", "parse_coba_flags"]


def _boolean(text: str) -> bool:
    """``true`` / ``false`` (any case) of a bool flag such as ``--coba.size_refills``."""
    if text.lower() not in ("true", "false"):
        raise ValueError(f"{text!r} is not true or false")
    return text.lower() == "true"


def _parser_for(annotation: str):
    """The argparse ``type`` of a `CobaConfig` field from its annotation: ``float | None`` takes ``none``,
    ``bool`` takes ``true`` / ``false``."""
    base = {"int": int, "float": float, "bool": _boolean}.get(annotation.split("|")[0].strip(), str)
    if "None" not in annotation:
        return base
    return lambda text: None if text.lower() in ("none", "null") else base(text)


def parse_coba_flags(argv: list[str]) -> tuple[CobaConfig, str, list[str]]:
    """Split ``argv`` into (the `CobaConfig`, ``--coba.id_key``, OpenRLHF's flags).

    Raises:
        SystemExit: an unknown ``--coba.`` flag (argparse's message lists the known ones).
        CobaRefusal: `CobaConfig`'s checks, naming ``coba.<field>``.
    """
    parser = argparse.ArgumentParser(
        prog="python -m coba_verl.openrlhf.train", add_help=False, allow_abbrev=False
    )
    for f in fields(CobaConfig):
        parser.add_argument(
            f"{COBA_FLAG_PREFIX}{f.name}", dest=f.name, type=_parser_for(str(f.type)), default=f.default
        )
    parser.add_argument(f"{COBA_FLAG_PREFIX}id_key", dest="id_key", default=DEFAULT_ID_KEY)
    known, rest = parser.parse_known_args(argv)
    unknown = [a for a in rest if a.startswith(COBA_FLAG_PREFIX)]
    if unknown:
        parser.error(f"unknown coba flag(s) {unknown}; known: {sorted(vars(known))}")
    values = vars(known)
    id_key = values.pop("id_key")
    return CobaConfig(**values), id_key, rest


class _StandIns:
    """What ``openrlhf.cli.train_ppo_ray`` calls in coba-verl's place, and whether it called them.

    OpenRLHF 0.11.2 builds its parser and checks its arguments under ``if __name__ == "__main__"``
    and picks the trainer class inside ``train``, with no hook for either, so its CLI runs whole
    (``runpy``) with two names of their home modules standing in while it runs:

    - ``openrlhf.utils.config.hierarchize`` (the one conversion of OpenRLHF's flat flags, right after
      parsing): OpenRLHF's own, then `check_args` before Ray starts, then the coba settings for the
      trainer actor (``args.coba``);
    - ``openrlhf.trainer.ppo_trainer.PPOTrainer``: this object, whose ``remote`` builds
      `CobaPPOTrainer`.

    Whether OpenRLHF still goes through them is checked by what it does, not by reading its source:
    a trainer built from arguments that did not pass `hierarchize` is refused before its actor
    starts, and a run that ends without building coba-verl's trainer (OpenRLHF found its trainer
    elsewhere, so the budgets were never used) is refused when it ends (`check_built`). Both are a
    `FrameworkMismatch` naming the OpenRLHF to install.
    """

    def __init__(self, coba: CobaConfig, id_key: str, hierarchize: Any, trainer: Any) -> None:
        self.coba, self.id_key = coba, id_key
        self._hierarchize, self._trainer = hierarchize, trainer
        self.built = False

    def hierarchize(self, flat: Any) -> Any:
        args = self._hierarchize(flat)
        check_args(args, self.coba)
        config = asdict(self.coba)
        if config["prior_file"] is not None:  # Ray's actors need not share the launcher's directory
            config["prior_file"] = str(Path(config["prior_file"]).expanduser().resolve())
        args.coba = {"config": config, "id_key": self.id_key}
        return args

    def remote(self, pretrain: Any, strategy: Any, *args: Any, **kwargs: Any) -> Any:
        if not hasattr(strategy.args, "coba"):  # set by `hierarchize` alone
            raise openrlhf_mismatch(
                "its train_ppo_ray built the trainer from arguments that did not pass "
                "openrlhf.utils.config.hierarchize, so coba-verl's checks and settings never reached them"
            )
        self.built = True
        return self._trainer.remote(pretrain, strategy, *args, **kwargs)

    def check_built(self) -> None:
        if not self.built:
            raise openrlhf_mismatch(
                "its train_ppo_ray ran without building the trainer from "
                "openrlhf.trainer.ppo_trainer.PPOTrainer, so coba-verl's trainer and budgets were never used"
            )


def main(argv: list[str] | None = None) -> None:
    """``python -m coba_verl.openrlhf.train``: a refusal prints as one line, ``coba-verl: <message>``
    (exit 2), whether it comes from the coba flags, `check_args` or the trainer actor (a resume of
    another run's checkpoint); every other error keeps its traceback."""
    argv = sys.argv[1:] if argv is None else list(argv)
    with exit_on_refusal():
        coba, id_key, rest = parse_coba_flags(argv)
        _run_openrlhf(coba, id_key, rest)


def _run_openrlhf(coba: CobaConfig, id_key: str, rest: list[str]) -> None:
    import openrlhf.trainer.ppo_trainer as ppo_trainer
    import openrlhf.utils.config as openrlhf_config

    import coba_verl.openrlhf  # noqa: F401  (checks OpenRLHF's API)
    from coba_verl.openrlhf.trainer import CobaPPOTrainer

    upstream = openrlhf_config.hierarchize, ppo_trainer.PPOTrainer
    stand_ins = _StandIns(coba, id_key, openrlhf_config.hierarchize, CobaPPOTrainer)
    openrlhf_config.hierarchize, ppo_trainer.PPOTrainer = stand_ins.hierarchize, stand_ins
    sys.argv = ["openrlhf.cli.train_ppo_ray", *rest]
    try:
        runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__", alter_sys=True)
    finally:
        openrlhf_config.hierarchize, ppo_trainer.PPOTrainer = upstream
    stand_ins.check_built()


if __name__ == "__main__":
    main()
