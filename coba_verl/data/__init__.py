"""Data preparation for CoBA-RL recipes: veRL parquet files with stable prompt indices.

``python -m coba_verl.data <dataset> --output-dir DIR`` (see :mod:`coba_verl.data.cli`) writes
the schema veRL's RLHFDataset reads, with ``data_source`` names that route to the right veRL
scorer (:mod:`coba_verl.data.sources`) and an integer ``extra_info.index`` that keys CoBA-RL's
per-prompt tracker. :mod:`coba_verl.data.reward` routes the DAPO-format evaluation sets that
veRL has no name for. One module a job: `loading` (hub probe, hub or local source), `rows` (the
row schema and rejections), `prepare` (writing a split and its manifest), `checks` (written files).
"""

from coba_verl.data.checks import check_files
from coba_verl.data.formats import gold_response, render_prompt
from coba_verl.data.loading import load_split
from coba_verl.data.prepare import SplitReport, prepare_split
from coba_verl.data.rows import SCHEMA, build_rows
from coba_verl.data.sources import GROUPS, PAPER_EVAL, SOURCES, SourceSpec, resolve

__all__ = [
    "SCHEMA",
    "SOURCES",
    "GROUPS",
    "PAPER_EVAL",
    "SourceSpec",
    "SplitReport",
    "build_rows",
    "check_files",
    "gold_response",
    "load_split",
    "prepare_split",
    "render_prompt",
    "resolve",
]
