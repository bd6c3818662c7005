"""Test scaffolding for a real OpenRLHF run on CPU: CUDA shims and a stand-in rollout actor.

Python imports this file in every process started with ``tests/openrlhf/scaffold`` on PYTHONPATH
(the launch, and every Ray worker, which inherits the environment). It is never shipped: coba-verl
runs OpenRLHF unmodified on GPUs. Here it changes only what a CPU machine lacks, after the module
concerned is imported:

    ray.init                    gives the local cluster logical GPUs (OpenRLHF's placement groups need them)
    torch.cuda                  set_device / synchronize are no-ops; current_device() is "cpu"
    init_device_mesh            the "cuda" mesh becomes a "cpu" one (deepspeed.py:106)
    DeepSpeed                   torch's AdamW and gloo instead of its C++ ops (JIT-compiled on CPU,
                                minutes): torch_adam in the optimizer config, no shared-memory comm op
    NaiveReplayBuffer           keeps experiences on the CPU (replay_buffer.py:40 hard-codes cuda:)
    create_vllm_engines         StandInRolloutActor: transformers' generate behind OpenRLHF's rollout
                                actor interface; upstream's generate_responses and
                                SingleTurnAgentExecutor (reward function loading) run unchanged
    ActorPPOTrainer             vLLM weight sync is skipped: the stand-in keeps the initial weights

The stand-in samples each completion from the initial model with a seed that depends only on the
prompt's tokens and the sample's rank in its request, so two runs see the same completions (the
resume test compares their allocations).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import zlib
from types import SimpleNamespace

_PATCHES = {}


def _after_import(name):
    def register(fn):
        _PATCHES[name] = fn
        return fn

    return register


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader, patch):
        self._loader, self._patch = loader, patch

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        patch = _PATCHES.get(fullname)
        if patch is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _PatchingLoader(spec.loader, patch)
        return spec


@_after_import("ray")
def _ray(ray):
    init = ray.init

    def init_with_gpus(*args, **kwargs):
        kwargs.setdefault("num_gpus", 4)
        kwargs.setdefault("num_cpus", 8)
        kwargs.setdefault("include_dashboard", False)
        return init(*args, **kwargs)

    ray.init = init_with_gpus


@_after_import("torch")
def _torch(torch):
    torch.cuda.set_device = lambda device: None
    torch.cuda.synchronize = lambda device=None: None
    torch.cuda.current_device = lambda: "cpu"
    torch.cuda.empty_cache = lambda: None


@_after_import("openrlhf.utils.deepspeed.deepspeed")
def _deepspeed(module):
    mesh = module.init_device_mesh
    module.init_device_mesh = lambda device_type, *args, **kwargs: mesh("cpu", *args, **kwargs)
    train_config = module.get_train_ds_config

    def torch_adam(*args, **kwargs):
        config = train_config(*args, **kwargs)
        if "optimizer" in config:
            config["optimizer"].setdefault("params", {})["torch_adam"] = True
        return config

    module.get_train_ds_config = torch_adam


@_after_import("deepspeed.comm.torch")
def _deepspeed_comm(module):
    module.build_shm_op = lambda: None


@_after_import("openrlhf.trainer.ppo_utils.replay_buffer")
def _replay_buffer(module):
    import torch

    init = module.NaiveReplayBuffer.__init__

    def init_on_cpu(self, *args, **kwargs):
        current, torch.cuda.current_device = torch.cuda.current_device, lambda: 0  # for its f"cuda:{...}"
        try:
            init(self, *args, **kwargs)
        finally:
            torch.cuda.current_device = current
        self.target_device = torch.device("cpu")

    module.NaiveReplayBuffer.__init__ = init_on_cpu


@_after_import("openrlhf.trainer.ray.ppo_actor")
def _ppo_actor(module):
    module.ActorPPOTrainer._init_vllm_sync_group = lambda self, backend: None
    module.ActorPPOTrainer.broadcast_to_vllm = lambda self: None


@_after_import("openrlhf.trainer.ray")
def _rollout(package):
    package.create_vllm_engines = create_stand_in_engines


def create_stand_in_engines(num_engines, tensor_parallel_size, pretrain, seed, *args, **kwargs):
    """``create_vllm_engines``'s interface: ``num_engines`` stand-in actors (one logical GPU each)."""
    import ray

    actor = ray.remote(num_gpus=1, num_cpus=0)(_stand_in_class())
    return [actor.remote(pretrain, seed + i, kwargs.get("remote_rm_url")) for i in range(num_engines)]


def _stand_in_class():
    from openrlhf.trainer.ray.vllm_engine import RolloutRayActor
    from openrlhf.utils.agent import SingleTurnAgentExecutor

    upstream = RolloutRayActor.__ray_metadata__.modified_class.__ray_actor_class__

    class StandInRolloutActor:
        """OpenRLHF's rollout actor with vLLM replaced by transformers' generate (test scaffolding)."""

        def __init__(self, pretrain, seed, remote_rm_url):
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer

            torch.set_num_threads(1)
            self.model = AutoModelForCausalLM.from_pretrained(pretrain).eval()
            self.tokenizer = AutoTokenizer.from_pretrained(pretrain)
            self.executor = SingleTurnAgentExecutor(remote_rm_url)
            self.seed = seed
            self._rank = {}  # prompt tokens -> samples drawn in the current request

        async def generate_responses(self, prompt, label, sampling_params, max_length, hf_tokenizer, **kw):
            """Upstream's (num_samples executor calls), with the sample ranks of this prompt reset."""
            key = tuple(hf_tokenizer(text=prompt, add_special_tokens=False)["input_ids"])
            self._rank[key] = 0
            return await upstream.generate_responses(
                self, prompt, label, sampling_params, max_length, hf_tokenizer, **kw
            )

        async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
            import torch

            key = tuple(prompt_token_ids)
            rank = self._rank.get(key, 0)
            self._rank[key] = rank + 1
            torch.manual_seed(zlib.crc32(f"{self.seed}/{key}/{rank}".encode()))
            ids = torch.tensor([prompt_token_ids])
            with torch.no_grad():
                out = self.model.generate(
                    ids,
                    attention_mask=torch.ones_like(ids),
                    do_sample=True,
                    temperature=getattr(sampling_params, "temperature", 1.0),
                    top_k=0,
                    max_new_tokens=sampling_params.max_tokens,
                    min_new_tokens=getattr(sampling_params, "min_tokens", 1),
                    pad_token_id=self.tokenizer.pad_token_id,
                )
            tokens = out[0, ids.shape[1] :].tolist()
            finish = "length" if len(tokens) >= sampling_params.max_tokens else "stop"
            text = self.tokenizer.decode(tokens, skip_special_tokens=False)
            output = SimpleNamespace(token_ids=tokens, text=text, finish_reason=finish, logprobs=None)
            return SimpleNamespace(outputs=[output])

        def get_num_unfinished_requests(self):
            return 0

        def wake_up(self, tags=None):
            return None

        def sleep(self, level=1):
            return None

    return StandInRolloutActor


sys.meta_path.insert(0, _Finder())
