"""veRL's file-logger metrics of a run, read back step by step (the reports' one reader).

``trainer.logger=[console,file]`` with ``VERL_FILE_LOGGER_PATH=FILE`` makes veRL's `Tracking` write
one JSON line per logged step, ``{"step": s, "data": {metric: value}}``; `run_summary` and
`run_plots` both read it through `read_metrics`.
"""

from __future__ import annotations

import json
from pathlib import Path


def read_metrics(path: str | Path) -> dict[int, dict[str, float]]:
    """Step -> every metric logged at that step (lines of the same step merged, later ones winning)."""
    steps: dict[int, dict[str, float]] = {}
    for line in Path(path).expanduser().read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            steps.setdefault(int(row["step"]), {}).update(row["data"])
    return steps
