"""Suite-wide collection rules: the ``e2e_extended`` runs only when asked for, and ``e2e`` first.

They are left out unless the ``-m`` expression names ``e2e`` (``-m e2e``, ``-m e2e_extended``;
``-m "not e2e"`` leaves them out by itself), so that ``python -m pytest`` and CI skip them and any
other selection such as ``-m "not slow"`` does too.

The ``e2e`` tests (veRL's real trainers, one file of about 15 minutes) are moved to the front of
the run: under ``-n 2 --dist loadfile`` their file then starts on one worker at once while the
other takes every other file, instead of starting after them and finishing last.
"""

from __future__ import annotations

import pytest

EXTENDED = "e2e_extended"
E2E = "e2e"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "e2e" not in (config.option.markexpr or ""):
        extended = [item for item in items if item.get_closest_marker(EXTENDED)]
        if extended:
            config.hook.pytest_deselected(items=extended)
            items[:] = [item for item in items if not item.get_closest_marker(EXTENDED)]
    items.sort(key=lambda item: item.get_closest_marker(E2E) is None)  # stable: e2e first, order kept
