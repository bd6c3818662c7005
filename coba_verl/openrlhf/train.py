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

from coba_verl.cli import carried_error, refuse
from coba_verl.core import CobaConfig
from coba_verl.openrlhf.checks import COBA_FLAG_PREFIX, DEFAULT_ID_KEY, check_args
from coba_verl.records.saved_state import ResumeMismatch

__all__ = ["main", "parse_coba_flags"]


def _parser_for(annotation: str):
    """The argparse ``type`` of a `CobaConfig` field from its annotation: ``float | None`` takes ``none``."""
    base = {"int": int, "float": float}.get(annotation.split("|")[0].strip(), str)
    if "None" not in annotation:
        return base
    return lambda text: None if text.lower() in ("none", "null") else base(text)


def parse_coba_flags(argv: list[str]) -> tuple[CobaConfig, str, list[str]]:
    """Split ``argv`` into (the `CobaConfig`, ``--coba.id_key``, OpenRLHF's flags).

    Raises:
        SystemExit: an unknown ``--coba.`` flag (argparse's message lists the known ones).
        ValueError, TypeError: `CobaConfig`'s checks, naming ``coba.<field>``.
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


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        coba, id_key, rest = parse_coba_flags(argv)
    except (ValueError, TypeError) as err:
        refuse(err)

    import openrlhf.trainer.ppo_trainer as ppo_trainer
    import openrlhf.utils.config as openrlhf_config

    import coba_verl.openrlhf  # noqa: F401  (checks OpenRLHF's API)
    from coba_verl.openrlhf.trainer import CobaPPOTrainer

    hierarchize, upstream_trainer = openrlhf_config.hierarchize, ppo_trainer.PPOTrainer

    def hierarchize_and_check(flat: Any) -> Any:
        args = hierarchize(flat)
        try:
            check_args(args, coba)
        except ValueError as err:
            refuse(err)
        config = asdict(coba)
        if config["prior_file"] is not None:  # Ray's actors need not share the launcher's directory
            config["prior_file"] = str(Path(config["prior_file"]).expanduser().resolve())
        args.coba = {"config": config, "id_key": id_key}
        return args

    # train_ppo_ray's __main__ imports both names when it runs, so these stand-ins are what it uses.
    openrlhf_config.hierarchize = hierarchize_and_check
    ppo_trainer.PPOTrainer = CobaPPOTrainer
    sys.argv = ["openrlhf.cli.train_ppo_ray", *rest]
    try:
        runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__", alter_sys=True)
    except Exception as error:
        mismatch = carried_error(error, ResumeMismatch)  # raised in the trainer actor's fit
        if mismatch is None:
            raise
        refuse(mismatch)
    finally:
        openrlhf_config.hierarchize, ppo_trainer.PPOTrainer = hierarchize, upstream_trainer


if __name__ == "__main__":
    main()
