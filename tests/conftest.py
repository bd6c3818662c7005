"""Suite-wide collection rule: the ``e2e_extended`` runs only when asked for.

They are left out unless the ``-m`` expression names ``e2e`` (``-m e2e``, ``-m e2e_extended``;
``-m "not e2e"`` leaves them out by itself), so that ``python -m pytest`` and CI skip them and any
other selection such as ``-m "not slow"`` does too.
"""

from __future__ import annotations

import pytest

EXTENDED = "e2e_extended"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "e2e" in (config.option.markexpr or ""):
        return
    extended = [item for item in items if item.get_closest_marker(EXTENDED)]
    if extended:
        config.hook.pytest_deselected(items=extended)
        items[:] = [item for item in items if not item.get_closest_marker(EXTENDED)]
