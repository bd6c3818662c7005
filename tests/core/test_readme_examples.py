"""The `>>>` examples in README.md and in the core's docstrings run as written."""

from __future__ import annotations

import doctest
from pathlib import Path

import coba_verl.core.api
import coba_verl.core.config
import coba_verl.core.values

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_examples_run_as_written():
    result = doctest.testfile(str(README), module_relative=False, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 3
    assert result.failed == 0


def test_allocate_docstring_example_runs_as_written():
    result = doctest.testmod(coba_verl.core.api)
    assert result.attempted >= 2
    assert result.failed == 0


def test_argument_check_docstring_examples_run_as_written():
    for module in (coba_verl.core.config, coba_verl.core.values):
        result = doctest.testmod(module)
        assert result.attempted >= 1 and result.failed == 0, module.__name__
