"""The ``torch.cuda``-like module veRL calls as ``get_torch_device()`` on the ``cpu`` platform.

``torch.cpu`` has the stream and device calls but no memory statistics, which veRL's workers
query around every phase (``verl/utils/memory_utils.py``, ``log_gpu_memory_usage``). Memory
functions report zero device memory (there is none; host memory is the process's RSS), cache
and RNG calls act on the CPU; everything else is ``torch.cpu``'s.
"""

from __future__ import annotations

from typing import Any

import psutil
import torch


def __getattr__(name: str) -> Any:  # Stream, current_stream, stream, synchronize, is_available, ...
    return getattr(torch.cpu, name)


def current_device() -> str:
    return "cpu"


def device_count() -> int:
    return 1


def set_device(device: Any) -> None:
    return None


def empty_cache() -> None:
    return None


def ipc_collect() -> None:
    return None


def memory_allocated(device: Any = None) -> int:
    return 0


def memory_reserved(device: Any = None) -> int:
    return 0


def max_memory_allocated(device: Any = None) -> int:
    return 0


def max_memory_reserved(device: Any = None) -> int:
    return 0


def reset_peak_memory_stats(device: Any = None) -> None:
    return None


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) bytes of host memory."""
    vm = psutil.virtual_memory()
    return int(vm.available), int(vm.total)


def get_device_name(device: Any = None) -> str:
    return "cpu"


def get_rng_state(device: Any = None) -> torch.Tensor:
    return torch.get_rng_state()


def set_rng_state(state: torch.Tensor, device: Any = None) -> None:
    torch.set_rng_state(state)


def manual_seed(seed: int) -> None:
    torch.manual_seed(seed)


def manual_seed_all(seed: int) -> None:
    torch.manual_seed(seed)
