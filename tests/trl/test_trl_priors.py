"""`CobaGRPOTrainer` takes the same pass-rate priors as the veRL trainers (`coba_verl.records.priors`)."""

from __future__ import annotations

import numpy as np
import pytest

from coba_verl.core import CobaConfig
from coba_verl.trl import CobaGRPOTrainer


def test_a_pass_rate_column_and_a_file_seed_the_tracker_by_prompt_id(make_trainer, toy, tmp_path):
    dataset = toy.dataset().add_column("stats", [{"rate": r} for r in (0.25, None, 1.0, 0.5)])
    path = tmp_path / "priors.jsonl"
    path.write_text('{"prompt_id_is": "ignored", "index": 3, "successes": 0, "attempts": 4}\n')
    coba = CobaConfig(prior_field="stats.rate", prior_file=str(path), prior_weight=4)
    trainer = make_trainer(CobaGRPOTrainer, dataset=dataset, coba_config=coba)
    p = trainer.allocator.tracker.pass_rates(trainer.coba_prompt_ids.ids([0, 1, 2, 3]))
    assert p[0] == 0.25 and np.isnan(p[1]) and p[2] == 1.0 and p[3] == 0.0  # the file wins for prompt 3
    assert trainer.allocator.tracker.f_bar == 1.0 - (0.25 + 1.0 + 0.0) / 3


def test_a_prior_field_no_row_has_is_refused(make_trainer):
    with pytest.raises(ValueError, match="prior_field='pass_rate': no row of the training set has it"):
        make_trainer(CobaGRPOTrainer, coba_config=CobaConfig(prior_field="pass_rate"))
