"""TRL's vLLM server mode with per-prompt group sizes: one ``generate`` call per group size.

TRL 1.16's server mode (``VLLMGeneration.generate``, ``trl/generation/vllm_generation.py:593-660``)
gathers every process's rows on the main process, keeps every ``num_generations``-th one and asks
the server for ``n=num_generations`` completions of each: under per-prompt budgets the rows of
prompt i are B_i consecutive copies, so that stride would skip prompts and pair completions with
the wrong ones. `CobaGRPOTrainer` therefore calls TRL's generation with ``num_generations=1`` (every
row is kept, in order) and puts `GroupSizeClient` in front of TRL's ``vllm_client``: it reads the
rows back as runs of one prompt, and asks the server, once per distinct run length b, for ``n=b``
completions of each prompt that has b rows, so that the server samples a group as TRL would
(``n`` completions of one request, not b identical requests that a data-parallel server might
seed alike). Completions are put back in row order, each row with its prompt's ids::

    rows        p7 p7 | p2 p2 p2 p2 | p5 p5 p5 | p9 p9 p9       (runs 2, 4, 3, 3)
    calls       generate([p7], n=2); generate([p2], n=4); generate([p5, p9], n=3)
    returned    one completion per row, rows in the order given

Adjacent rows of two prompts with identical token ids form one run; that is harmless (the same
prompt sampled b1 + b2 times).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any


def runs_of(prompts: list[list[int]]) -> list[tuple[int, int]]:
    """``(first row, length)`` of each run of equal consecutive prompts: ``[a, a, b] -> [(0, 2), (2, 1)]``."""
    runs: list[tuple[int, int]] = []
    for row, prompt in enumerate(prompts):
        if runs and prompts[runs[-1][0]] == prompt:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((row, 1))
    return runs


class GroupSizeClient:
    """TRL's ``VLLMClient`` for rows of variable group sizes (module docstring).

    Every attribute but ``generate`` is the wrapped client's (weight sync, prefix cache, ...).

    Args:
        client: TRL's ``VLLMClient`` (or any object with its ``generate``).
    """

    def __init__(self, client: Any) -> None:
        self.client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def generate(
        self, prompts: list[list[int]], features: list[Any] | None = None, n: int = 1, **params: Any
    ) -> dict[str, Any]:
        """``client.generate`` of one completion per row, made as one call per run length.

        Args:
            prompts: token ids of each row (TRL's rows, gathered over processes, in order).
            features: the rows' image features, or None.
            n: 1 in training (`CobaGRPOTrainer` asks for one completion per row); any other n is
                TRL's own call with equal groups (evaluation), passed on unchanged.
            **params: TRL's sampling parameters, passed on unchanged.

        Returns:
            TRL's output dict, one entry per row: ``prompt_ids``, ``completion_ids``, ``logprobs`` and,
            when the server returns it, ``logprob_token_ids``.

        Raises:
            ValueError: the server returned another number of completions than asked for.
        """
        if n != 1:  # TRL's own call, equal groups (evaluation): nothing to regroup
            return self.client.generate(prompts=prompts, features=features, n=n, **params)
        by_size: dict[int, list[int]] = defaultdict(list)  # run length -> first rows of its runs
        for first, size in runs_of(prompts):
            by_size[size].append(first)
        outputs: dict[str, list[Any] | None] = {}
        for size, firsts in sorted(by_size.items()):
            got = self.client.generate(
                prompts=[prompts[row] for row in firsts],
                features=None if features is None else [features[row] for row in firsts],
                n=size,
                **params,
            )
            if len(got["completion_ids"]) != size * len(firsts):
                raise ValueError(
                    f"the vLLM server returned {len(got['completion_ids'])} completions for {len(firsts)} "
                    f"prompts with n={size}; expected {size * len(firsts)}."
                )
            for key in ("completion_ids", "logprobs", "logprob_token_ids"):
                if got.get(key) is None:
                    outputs.setdefault(key, None)
                    continue
                rows = outputs.setdefault(key, [None] * len(prompts))
                for k, first in enumerate(firsts):
                    rows[first : first + size] = got[key][k * size : (k + 1) * size]
        outputs["prompt_ids"] = [list(prompt) for prompt in prompts]
        return outputs
