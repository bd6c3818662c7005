"""The veRL 0.9.1 code whose start-up conditions coba-verl checks before Ray, and its source digests.

A launch check that states one of veRL's own conditions (`coba_verl.verl_plugin.launch.verl_start`,
`coba_verl.verl_plugin.launch.trainer_start`, `coba_verl.verl_plugin.launch.separate_async_start`,
`coba_verl.verl_plugin.launch.checkpoint_engines`) applies it only while the veRL code stating it is
veRL 0.9.1's: `verl_code_is_known` compares the sha256 of that code's source, read with `ast` without
importing veRL, with `VERL_START_CODE`. A changed one is left to veRL, which then stops inside Ray,
and a WARNING names the code.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import logging
from pathlib import Path
from typing import NamedTuple

logger = logging.getLogger(__name__)


class VerlCode(NamedTuple):
    """A piece of veRL's code whose condition a launch check states before Ray."""

    path: str  # under the installed ``verl`` package
    qualname: str  # ``Class.method``
    sha256: str  # of its source in veRL 0.9.1 (`verl_source_sha256`)


#: The veRL 0.9.1 code whose start-up conditions `check_verl_start` checks before Ray, by rule. A
#: rule is checked only while its code is veRL 0.9.1's (the source digest); otherwise it is left to
#: veRL, which then stops inside Ray, and a WARNING names the code that changed.
VERL_START_CODE: dict[str, VerlCode] = {
    "separate_async": VerlCode(
        "trainer/ppo/v1/trainer_separate_async.py", "PPOTrainerSeparateAsync.__init__",
        "de8560c80035afd2e889076276d0436e45485b0e36db5d26c76ea7ee49567e17",
    ),
    "hybrid_rollout": VerlCode(
        "trainer/config/config.py", "HybridRolloutSwitchConfig.__post_init__",
        "1427b397ea91579606abba6bef3ec7f23ba638718d97c9d49137fcea05297e94",
    ),
    "old_policy_snapshot": VerlCode(
        "experimental/separation/engine_workers.py", "DetachActorWorker._get_strategy_handlers",
        "60ef996f6bd8a0a8629d94571d1de0fe07d63893cc7762580e7c244a9f32f4fc",
    ),
    "standalone_pool": VerlCode(
        "workers/rollout/llm_server.py", "LLMServerManager._initialize_llm_servers",
        "4705b15549e8ee234121ee10b0fb1eddff01047ff699b7d34937ba4dc3068335",
    ),
    "local_updates": VerlCode("trainer/ppo/v1/trainer_base.py", "PPOTrainer.step",
        "f96e3dddcd7a58356d006b8ae5bf2f13522746be4596888730c17efeff4692d5",
    ),
    # the rollout pool on the training devices: the same code as the standalone pool's
    "hybrid_pool": VerlCode(
        "workers/rollout/llm_server.py", "LLMServerManager._initialize_llm_servers",
        "4705b15549e8ee234121ee10b0fb1eddff01047ff699b7d34937ba4dc3068335",
    ),
    "reward_pool": VerlCode(
        "trainer/ppo/v1/trainer_base.py", "PPOTrainer._init_resource_pool_mgr",
        "b55a978004914e85848b2b35655c5d922514bd9733592bbb34420a97f465f13e",
    ),
    "reward_pool_classic": VerlCode(
        "trainer/main_ppo_v0.py", "BaseTaskRunner.init_resource_pool_mgr",
        "40b3b83c968d7bc3749c748dd380f7298a7c2c01d5e9248da60f90094deabb44",
    ),
    "replay_buffer": VerlCode(
        "trainer/ppo/v1/trainer_base.py", "PPOTrainer._build_replay_buffer",
        "6f86000f22fb51616310f1db5c0d6102622ac3351af6c1fcfaf3abaa3f8cfa59",
    ),
    "filter_groups": VerlCode(
        "trainer/ppo/v1/trainer_base.py", "PPOTrainer._resolve_filter_groups_metric",
        "e2a75e160b309ce8263905dd84db05f19a0f8023bb31494713e7d42f439e112b",
    ),
    "off_policy": VerlCode(
        "trainer/ppo/v1/replay_buffer.py", "ReplayBuffer.__init__",
        "9c5830425e298eaa815efbb31040ffcff878fdc7c447e7cb82389839c242124a",
    ),
    "checkpoint_engine": VerlCode(
        "checkpoint_engine/base.py", "CheckpointEngineRegistry.get",
        "79b3206ee5b22036cedf6904d4a1cda13d64e87d41a0208f5ded25a994f901ae",
    ),
    "disaggregated_rollout": VerlCode(
        "workers/config/rollout.py", "RolloutConfig.__post_init__",
        "6015c0fb557f095291da3de0b9ef4293e8a8cf3bcca4cc3f65434362f05a2900",
    ),
    # the HCCL engine's import guard (`checkpoint_engines.KNOWN_GUARDS`)
    "npu_guard": VerlCode(
        "utils/device.py", "is_torch_npu_available",
        "ac980496d5847d3ad471dd4186ee2a136d12f9fb11ffc301d363402061b9f290",
    ),
    # the rollout worker's device mesh over the training devices, and the roles that build it
    "rollout_mesh": VerlCode(
        "workers/engine_workers.py", "ActorRolloutRefWorker.init_model",
        "8bf2619c9dbfa87754b49584fbb66f75939bbd485998d217a970859a1c9597cb",
    ),
    "rollout_role": VerlCode(
        "trainer/ppo/v1/trainer_base.py", "PPOTrainer._init_resource_pool_mgr",
        "b55a978004914e85848b2b35655c5d922514bd9733592bbb34420a97f465f13e",
    ),
    "rollout_role_classic": VerlCode(
        "trainer/main_ppo_v0.py", "BaseTaskRunner.add_actor_rollout_worker",
        "e469c9d8783a73265b38ba6032f0fae638e4ff5d016c0496c61bfbbf787f2610",
    ),
}  # fmt: skip


def verl_folder() -> Path | None:
    """The installed ``verl`` package's folder (found, not imported), None without veRL."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


@functools.cache
def verl_source_sha256(path: str, qualname: str) -> str | None:
    """sha256 of the source text of ``qualname`` in the installed veRL's ``path``; None where it is
    not found. Read with `ast`, without importing veRL: the driver checks before veRL picks its
    platform (`coba_verl.cpu.launcher.prepare_cpu_run` sets it)."""
    folder = verl_folder()
    if folder is None:
        return None
    try:
        source = (folder / path).read_text(encoding="utf-8")
    except OSError:
        return None
    node: ast.AST | None = ast.parse(source)
    definitions = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    for name in qualname.split("."):
        children = ast.iter_child_nodes(node)
        node = next((c for c in children if isinstance(c, definitions) and c.name == name), None)
        if node is None:
            return None
    segment = ast.get_source_segment(source, node)
    return hashlib.sha256(segment.encode()).hexdigest() if segment else None


def verl_code_is_known(rule: str) -> bool:
    """True while the veRL code of ``rule`` (`VERL_START_CODE`) is veRL 0.9.1's; else False, said
    once a process at WARNING."""
    code = VERL_START_CODE[rule]
    if verl_source_sha256(code.path, code.qualname) == code.sha256:
        return True
    _say_code_changed(rule)
    return False


@functools.cache
def _say_code_changed(rule: str) -> None:
    code = VERL_START_CODE[rule]
    logger.warning(
        "veRL's %s (verl/%s) is not veRL 0.9.1's: coba-verl leaves its start-up conditions to veRL, "
        "which checks them inside Ray.",
        code.qualname,
        code.path,
    )
