"""veRL's platform interface for a machine without accelerators (``VERL_PLATFORM=cpu``).

veRL resolves its device through a platform singleton (``verl/plugin/platform``): device name,
communication backend, Ray resource. It ships ``nvidia``, ``npu`` and ``rocm`` and, when none is
detected, falls back to ``nvidia``. `PlatformCPU` is registered under the name ``cpu`` with
veRL's own ``PlatformRegistry.register`` and selected with ``VERL_PLATFORM=cpu``:

=========================  =====================================================================
device / torch module      ``"cpu"`` / `coba_verl.cpu.device` (``torch.cpu`` plus zero device memory)
communication backend      ``gloo``: veRL's ``"cpu:gloo,{device}:{backend}"`` becomes
                           ``"cpu:gloo,cpu:gloo"``, a valid gloo-only process group
Ray resource               ``GPU``, *logical*: veRL's resource pools ask one accelerator per
                           worker (``RayResourcePool`` sets ``use_gpu=True``), so the launcher
                           starts Ray with ``num_gpus`` = worker slots (see `launcher`)
IPC, NVTX, profiler, RNG   none / no-ops / ``torch.manual_seed``
=========================  =====================================================================
"""

from __future__ import annotations

import contextlib
import os
from types import ModuleType
from typing import Any

import torch
from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry

from coba_verl.cpu import PLATFORM_NAME


@PlatformRegistry.register(platform=PLATFORM_NAME)
class PlatformCPU(PlatformBase):
    """The CPU as a veRL platform: gloo collectives, logical Ray ``GPU`` slots, no device memory."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> ModuleType:
        from coba_verl.cpu import device

        return device

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        # Never auto-detected: only an explicit VERL_PLATFORM=cpu selects it.
        return os.environ.get("VERL_PLATFORM", "").strip().lower() == PLATFORM_NAME

    def current_device(self) -> str:  # type: ignore[override]
        # veRL passes it to .to(...) and torch.device(...): an int would mean an accelerator index.
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        # Ray still sets it for actors holding a logical GPU; nothing reads it as a real device.
        return "CUDA_VISIBLE_DEVICES"

    @contextlib.contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None
