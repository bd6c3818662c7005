"""A reward function that scores with the run's own one and records each sample's prompt index.

veRL's validation dump (``trainer.validation_data_dir``) holds, for every generation, the
prompt text, the score and the reward function's extra values, but not ``extra_info.index``
(its ``uid`` is a random UUID per validation batch), and prompt text does not identify a prompt
(two rows may share it). ``coba-verl estimate`` therefore sets this module as
``reward.custom_reward_function`` with the run's own function in its ``reward_kwargs``::

    reward.custom_reward_function.path = pkg://coba_verl.verl_plugin.hooks.index_reward
    reward.custom_reward_function.name = compute_score          (compute_score_async for an async one)
    reward.custom_reward_function.reward_kwargs.coba_inner_path = <the run's path, or null: veRL's default>
    reward.custom_reward_function.reward_kwargs.coba_inner_name = <the run's name>

The score is the inner function's, unchanged; the result is a dict (veRL's reward managers take
``score`` and keep the other keys as ``reward_extra_info``, which the dump writes per row) with
one more key, `INDEX_KEY`: the prompt's ``extra_info.index`` as JSON text (text, so that veRL's
validation metrics skip it instead of averaging indices; JSON, so that it reads back with its
type). A float result becomes ``{"score": s, "acc": s}``, as veRL's naive manager reports it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from coba_verl.refusal import CobaRefusal

__all__ = ["INDEX_KEY", "INNER_NAME_KEY", "INNER_PATH_KEY", "compute_score", "compute_score_async"]

#: The reward_extra_info key holding ``json.dumps(extra_info["index"])``.
INDEX_KEY = "coba_index"
#: reward_kwargs keys naming the run's own reward function (path None: veRL's default_compute_score).
INNER_PATH_KEY = "coba_inner_path"
INNER_NAME_KEY = "coba_inner_name"


@functools.cache
def inner_function(path: str | None, name: str | None) -> Callable[..., Any]:
    """The run's reward function: ``path``/``name`` as veRL loads them, or veRL's default one."""
    if not path:
        from verl.utils.reward_score import default_compute_score

        return default_compute_score
    from verl.utils.import_utils import load_extern_object

    return load_extern_object(module_path=path, object_name=name or "compute_score")


def _split(kwargs: dict[str, Any]) -> tuple[Callable[..., Any], dict[str, Any]]:
    """(inner function, the call's keyword arguments without ours)."""
    rest = dict(kwargs)
    path = rest.pop(INNER_PATH_KEY, None)
    name = rest.pop(INNER_NAME_KEY, None)
    return inner_function(path, name), rest


def index_text(extra_info: Any) -> str:
    """``json.dumps(extra_info["index"])``.

    Raises:
        ValueError: the row has no ``extra_info.index`` (coba-verl's preflight checks the training
            files for it, so this means a dataset class that drops it).
    """
    if not isinstance(extra_info, dict) or extra_info.get("index") is None:
        keys = sorted(extra_info) if isinstance(extra_info, dict) else type(extra_info).__name__
        raise CobaRefusal(
            f"a sample reached the reward function without extra_info.index (extra_info: {keys}); "
            "coba-verl estimate keys each prompt's pass rate by it."
        )
    return json.dumps(extra_info["index"])


def with_index(result: Any, extra_info: Any) -> dict[str, Any]:
    """The inner result as veRL's managers read it, plus `INDEX_KEY`."""
    out = dict(result) if isinstance(result, dict) else {"score": result, "acc": result}
    out[INDEX_KEY] = index_text(extra_info)
    return out


def _extra_info(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``extra_info`` of a call ``(data_source, solution_str, ground_truth, extra_info, ...)``."""
    return kwargs["extra_info"] if "extra_info" in kwargs else (args[3] if len(args) > 3 else None)


def compute_score(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """The run's (synchronous) reward function's score, with the prompt's index."""
    fn, rest = _split(kwargs)
    return with_index(fn(*args, **rest), _extra_info(args, rest))


async def compute_score_async(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """The run's asynchronous reward function's score, with the prompt's index."""
    fn, rest = _split(kwargs)
    return with_index(await fn(*args, **rest), _extra_info(args, rest))
