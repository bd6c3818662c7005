"""What the three glues read and write beside the algorithm, framework-free (numpy only).

Modules:
    prompt_ids   a training row's stable index -> the tracker's id space [0, N) (`PromptIdMap`),
                 and the one rule an index follows (`INDEX_RULE`).
    priors       pass-rate priors: records from a row field or a JSON-lines file, seeding the tracker.
    saved_state  the allocator's saved state every glue's checkpoint keeps, and the resume check
                 against the run's prompts and model.

The glues (`coba_verl.verl_plugin`, `coba_verl.trl`, `coba_verl.openrlhf`) turn their framework's
dataset into the plain tables these modules read; the core (`coba_verl.core`) knows none of them.
"""
