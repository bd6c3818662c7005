"""`CobaSamplesGenerator`: OpenRLHF's `SamplesGenerator` with B_i samples for prompt i.

OpenRLHF 0.11.2 sends ``num_samples=n`` once per prompt (``samples_generator.py:209-236``) and cuts
the training chunk at ``batch_size * n`` samples from a buffer (``:100, :132-133``). Here a round of
M prompts is drawn as upstream draws it, the core allocator splits M * n samples into budgets B_i,
and each prompt goes to upstream's `_dispatch_prompts_to_vllm` alone with ``n_samples_per_prompt=B_i``
(one Ray request per prompt, so each request carries exactly one group). The whole round is one
training chunk: no group is split across steps. Evaluation keeps upstream's path and n.

    round ids  [7, 2, 5]       budgets [6, 2, 4]   (M = 3, n = 4, sum = 12)
    requests    (7, n=6) (2, n=2) (5, n=4)
    samples     [7 x6, 2 x2, 5 x4]   group [0, 0, 0, 0, 0, 0, 1, 1, 2, 2, 2, 2]
"""

from __future__ import annotations

import numpy as np
import ray
from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator, _collect_prompt_batch
from openrlhf.trainer.ray.vllm_engine import batch_vllm_engine_call

from coba_verl.core import BudgetAllocator
from coba_verl.openrlhf.checks import round_size
from coba_verl.records.rounds import Round

__all__ = ["CobaSamplesGenerator", "IdentifiedPrompt", "check_group"]


class IdentifiedPrompt(str):
    """A prompt's text carrying its tracker id, so that identical texts stay distinct prompts."""

    prompt_id: int

    def __new__(cls, text: str, prompt_id: int) -> IdentifiedPrompt:
        obj = super().__new__(cls, text)
        obj.prompt_id = int(prompt_id)
        return obj

    def __reduce__(self):
        return (IdentifiedPrompt, (str(self), self.prompt_id))


def check_group(prompt: IdentifiedPrompt, budget: int, responses: list[dict]) -> None:
    """Refuse a vLLM engine's answer to one prompt's request unless it is B_i responses to that prompt.

    Each request carries one prompt with ``n_samples_per_prompt=B_i``; the group its responses
    form is what the advantages and the tracker take for prompt i.

    Raises:
        RuntimeError: the engine returned another number of responses than B_i, or a response to
            another prompt; the message names the prompt id and the numbers.
    """
    if len(responses) != budget:
        raise RuntimeError(
            f"prompt id {prompt.prompt_id} was sent with n_samples_per_prompt={budget} but the vLLM engine "
            f"returned {len(responses)} responses: the engine did not honour the per-prompt sample count."
        )
    for k, response in enumerate(responses):
        if response["prompt"] != prompt:
            raise RuntimeError(
                f"response {k} of prompt id {prompt.prompt_id}'s request belongs to another prompt "
                f"({str(response['prompt'])[:80]!r} instead of {str(prompt)[:80]!r}): the vLLM engine mixed "
                "up the requests' groups."
            )


class CobaSamplesGenerator(SamplesGenerator):
    """Upstream's generator whose training rounds get per-prompt budgets from ``allocator``.

    Extends `generate_samples` (same return value: samples, filter pass rate (None: dynamic
    filtering is refused), prompts consumed, exhausted). The round it produced is `last_round`.
    """

    def __init__(self, *args, allocator: BudgetAllocator, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.allocator = allocator
        self.last_round: Round | None = None

    def generate_samples(self, **generate_kwargs):
        if getattr(self, "_dataloader_iter", None) is None:
            self._dataloader_iter = iter(self.prompts_dataloader)
        prompts, labels, images, exhausted = _collect_prompt_batch(
            self._dataloader_iter, round_size(self.args)
        )
        if exhausted:
            self._dataloader_iter = None
        if not prompts:
            self.last_round = None
            return [], None, 0, exhausted
        ids = np.asarray([p.prompt_id for p in prompts], dtype=np.int64)  # (M,)
        allocation = self.allocator.allocate(ids, len(prompts) * self.args.rollout.n_samples_per_prompt)

        if self.args.vllm.enable_sleep:
            batch_vllm_engine_call(self.vllm_engines, "wake_up")
        refs = []  # refs[i]: the B_i responses of prompt i
        for prompt, label, image, budget in zip(
            prompts, labels, images, allocation.budgets.tolist(), strict=True
        ):
            kwargs = {**generate_kwargs, "n_samples_per_prompt": int(budget)}
            refs.extend(self._dispatch_prompts_to_vllm([str(prompt)], [label], images=[image], **kwargs))
        groups = ray.get(refs)
        if self.args.vllm.enable_sleep:
            batch_vllm_engine_call(self.vllm_engines, "sleep")

        samples = []
        for prompt, budget, responses in zip(prompts, allocation.budgets.tolist(), groups, strict=True):
            check_group(prompt, budget, responses)
            samples.extend(self._process_response_into_experience(r, **generate_kwargs) for r in responses)
        self.last_round = Round(ids=ids, allocation=allocation)  # rollouts in group order, as sampled
        return samples, None, len(prompts), exhausted
