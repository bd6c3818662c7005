"""`coba-verl` console script: one entry point, three sub-commands.

coba-verl lab ...     CPU lab: strategies compared on a tiny model (coba_verl.lab)
coba-verl train ...   veRL GRPO training with CoBA budgets (coba_verl.main; Hydra overrides)
coba-verl data ...    write veRL parquet for GSM8K / MATH / DAPO-Math and eval sets (coba_verl.data)
"""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "lab": ("coba_verl.lab.cli", "CPU lab: compare allocation strategies on a tiny model"),
    "train": ("coba_verl.main", "veRL GRPO training with CoBA-RL budgets (Hydra overrides)"),
    "data": ("coba_verl.data.cli", "prepare veRL parquet datasets"),
}


def _usage() -> str:
    lines = ["usage: coba-verl {lab,train,data} [args...]", "", "commands:"]
    lines += [f"  {name:<7}{desc}" for name, (_, desc) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        sys.stdout.write(_usage() + "\n")
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        sys.stderr.write(f"coba-verl: unknown command {name!r}\n{_usage()}\n")
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    if name == "train":
        # Hydra reads sys.argv itself.
        sys.argv = [f"coba-verl {name}", *rest]
        result = module.main()
    else:
        result = module.main(rest)
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
