"""`coba-verl` console script: one entry point, six sub-commands.

coba-verl lab ...     CPU lab: strategies compared on a tiny model (coba_verl.lab)
coba-verl train ...   veRL GRPO training with CoBA budgets (coba_verl.main; Hydra overrides)
coba-verl estimate .. each training prompt's pass rate, measured by veRL (coba_verl.verl_plugin.estimate)
coba-verl data ...    write veRL parquet for GSM8K / MATH / DAPO-Math and eval sets (coba_verl.data)
coba-verl summary ... a finished run's summary from veRL's file logger (verl_plugin.reports.run_summary)
coba-verl plan ...    a step's cost before a run, uniform beside CoBA, DAPO too (coba_verl.records.plan_cli)
coba-verl --version   the installed version
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from importlib import resources

from coba_verl import __version__

COMMANDS = {
    "lab": ("coba_verl.lab.cli", "CPU lab: compare allocation strategies on a tiny model"),
    "train": ("coba_verl.main", "veRL GRPO training with CoBA-RL budgets (Hydra overrides)"),
    "estimate": ("coba_verl.verl_plugin.estimate", "measure training prompts' pass rates (coba.prior_file)"),
    "data": ("coba_verl.data.cli", "prepare veRL parquet datasets"),
    "summary": ("coba_verl.verl_plugin.reports.run_summary", "summarise a finished run (veRL's file logger)"),
    "plan": ("coba_verl.records.plan_cli", "predict a step's cost before a run (budgets, DAPO generation)"),
}

#: command -> (the extra that brings it, the top-level modules of that extra it imports).
NEEDS = {
    "lab": ("lab", ("torch", "transformers", "verl", "scipy", "matplotlib", "tqdm", "yaml")),
    "train": ("verl", ("verl", "hydra", "omegaconf", "ray", "torch")),
    "estimate": ("verl", ("verl", "hydra", "omegaconf", "ray", "torch")),
    "data": ("verl", ("verl", "pyarrow", "datasets")),
    "summary": ("verl", ("matplotlib",)),
    "plan": ("base", ()),  # numpy only
}


def missing_extra(name: str) -> str | None:
    """Why command ``name`` cannot run here (its extra is not installed), or None when it can."""
    extra, modules = NEEDS[name]
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if not missing:
        return None
    return (
        f"coba-verl {name}: needs the '{extra}' extra, not installed here (no module {', '.join(missing)}).\n"
        f'  in a clone: pip install -e ".[{extra}]"    (CPU only: first pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu)\n'
    )


def _usage() -> str:
    lines = ["usage: coba-verl {lab,train,estimate,data,summary,plan} [args...]"]
    lines += ["       coba-verl --version", ""]
    lines += ["commands:"]
    lines += [f"  {name:<10}{desc}" for name, (_, desc) in COMMANDS.items()]
    lines += ["", "Each command takes --help (train: a short usage; --help-full for veRL's whole config)."]
    return "\n".join(lines)


def coba_keys() -> list[tuple[str, str, str]]:
    """(key, default, comment) for each key of the ``coba`` config group, read from its yaml.

    The yaml mirrors `CobaConfig` key for key (a test checks), with a comment above each key or
    group of keys; the comment block at the top of the file is not a key's.
    """
    text = (resources.files("coba_verl") / "config" / "coba" / "default.yaml").read_text(encoding="utf-8")
    out: list[tuple[str, str, str]] = []
    comment: list[str] = []
    for line in text.splitlines():
        if not line.strip():
            comment = []
        elif line.startswith("#"):
            comment.append(line.lstrip("# ").strip())
        else:
            key, _, value = line.partition(":")
            out.append((key.strip(), value.strip(), " ".join(comment)))
            comment = []
    return out


def train_usage() -> str:
    """`coba-verl train --help`: what the command does, the ``coba.*`` keys, where the rest is."""
    keys = coba_keys()
    width = max(len(f"coba.{k}={v}") for k, v, _ in keys) + 2
    lines = [
        "usage: coba-verl train [--cpu] [KEY=VALUE ...]",
        "",
        "Trains with veRL's synchronous GRPO trainer, every step's rollouts spread over its prompts",
        "by CoBA-RL (per-prompt budgets B_i, sum = data.train_batch_size x actor_rollout_ref.rollout.n).",
        "Same as `python -m coba_verl.main`: veRL's ppo_trainer config plus the `coba` group; every",
        "veRL override works unchanged. The training parquet needs a unique extra_info.index per",
        "prompt (`coba-verl data` writes such files).",
        "",
        "example:",
        "  coba-verl train data.train_files=$HOME/data/coba/gsm8k/train.parquet \\",
        "      data.val_files=$HOME/data/coba/gsm8k/test.parquet data.train_batch_size=128 \\",
        "      actor_rollout_ref.rollout.n=16 actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct \\",
        "      actor_rollout_ref.rollout.name=vllm coba.strategy=coba",
        "",
        "coba.* keys (default, then meaning; full reference: coba_verl.core.config.CobaConfig):",
    ]
    for key, value, comment in keys:
        lines.append(f"  {f'coba.{key}={value}':<{width}}{comment}".rstrip())
    lines += [
        "",
        "--cpu: run veRL on CPU (a tiny model; the coba_cpu=cpu group, see recipes/tiny_cpu).",
        "",
        "veRL's full config (about 1,100 lines): coba-verl train --help-full",
        "  (or python -m coba_verl.main --help); the composed config of a run: add --cfg job.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        sys.stdout.write(_usage() + "\n")
        return 0
    if args[0] in ("-V", "--version"):
        sys.stdout.write(f"coba-verl {__version__}\n")
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        sys.stderr.write(f"coba-verl: unknown command {name!r}\n{_usage()}\n")
        return 2
    wants_help = "-h" in rest or "--help" in rest
    if name == "train" and wants_help:
        sys.stdout.write(train_usage() + "\n")  # before importing veRL (seconds) and its config
        return 0
    if not (name == "lab" and wants_help):  # the lab's --help needs nothing but the core
        error = missing_extra(name)
        if error:
            sys.stderr.write(error)
            return 1
    module = importlib.import_module(COMMANDS[name][0])
    if name == "train":
        # Hydra reads sys.argv itself; its --help prints veRL's whole config.
        # --cpu selects the CPU backend's config group (coba_verl/config/coba_cpu/cpu.yaml).
        translated = {"--help-full": "--help", "--cpu": "+coba_cpu=cpu"}
        sys.argv = [f"coba-verl {name}", *(translated.get(a, a) for a in rest)]
        result = module.main()
    else:
        result = module.main(rest)
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
