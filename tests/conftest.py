"""Suite-wide rules: every Ray a test starts is its own; the ``e2e_extended`` runs only when asked for.

``RAY_ADDRESS=local`` in every test process (`pytest_configure`, which runs in each pytest-xdist
worker too), and so in every subprocess a test starts with its environment: ``ray.init()`` without
an address (veRL's ``run_ppo``, the plugin tests' fixtures) starts a Ray of its own instead of
joining the cluster the last ``ray start`` on this machine recorded (``ray/_private/services.py:413-463``).
The multi-node test (``tests/cluster``) starts such a cluster beside the other tests and gives its
own launches the head's address explicitly.

The ``e2e_extended`` runs are left out unless the ``-m`` expression names ``e2e`` (``-m e2e``,
``-m e2e_extended``; ``-m "not e2e"`` leaves them out by itself), so that ``python -m pytest`` and
CI skip them and any other selection such as ``-m "not slow"`` does too.
"""

from __future__ import annotations

import os

import pytest

EXTENDED = "e2e_extended"
#: Ray's address meaning "start a fresh Ray, join none" (``ray/_private/services.py:707``).
OWN_RAY = "local"


def pytest_configure(config: pytest.Config) -> None:
    os.environ["RAY_ADDRESS"] = OWN_RAY


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "e2e" in (config.option.markexpr or ""):
        return
    extended = [item for item in items if item.get_closest_marker(EXTENDED)]
    if extended:
        config.hook.pytest_deselected(items=extended)
        items[:] = [item for item in items if not item.get_closest_marker(EXTENDED)]
