"""Test scaffolding: an import stub for vLLM, which does not install on a CPU machine.

OpenRLHF imports vLLM at module level; the CPU tests only need `SamplingParams` (a plain record
here) and the names `vllm_engine.py` imports. Nothing in it generates: the stand-in rollout actor
(`scaffold/sitecustomize.py`) does, with transformers.
"""

__version__ = "0.0.0+coba-test-stub"


class SamplingParams:
    """The fields OpenRLHF sets, kept as attributes."""

    def __init__(self, **fields):
        self.__dict__.update(fields)


class AsyncEngineArgs:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("vLLM is a test stub here: the CPU tests use the stand-in rollout actor")


class AsyncLLMEngine:
    @classmethod
    def from_engine_args(cls, *args, **kwargs):
        raise RuntimeError("vLLM is a test stub here: the CPU tests use the stand-in rollout actor")
