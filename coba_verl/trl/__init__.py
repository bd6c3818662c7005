"""CoBA-RL for TRL: `CobaGRPOTrainer`, TRL's `GRPOTrainer` with a rollout budget per prompt.

    from coba_verl.trl import CobaGRPOTrainer     # instead of: from trl import GRPOTrainer
    trainer = CobaGRPOTrainer(..., coba_config=CobaConfig(), prompt_id_column="prompt_id")

Needs the ``trl`` extra (``pip install torch==2.13.0 -e ".[trl]"`` in a clone, TRL 1.16). Modules:
    trainer     `CobaGRPOTrainer`: the five TRL methods it extends, and the design.
    groups      collapse / expand rows, TRL's advantage over variable groups.
    checks      the refused configurations, the TRL API it extends; prompt ids from the id column.
    checkpoint  the allocator's side file in TRL's checkpoint folder.

The example's task as a dataset TRL takes is `coba_verl.arithmetic.hf_dataset`.
"""

from coba_verl.trl.trainer import DEFAULT_ID_COLUMN, CobaGRPOTrainer

__all__ = ["DEFAULT_ID_COLUMN", "CobaGRPOTrainer"]
