"""Where a command's wall clock goes, process by process: run it, sample its process tree, tabulate.

    python bench/process_timeline.py --every 0.25 -- bash scripts/quickstart.sh

Every ``--every`` seconds the sampler reads ``/proc/PID/stat`` of each process descended from the
command (Ray's GCS, raylet and workers are children of the driver that started Ray, so they are
in the tree) and its ``cmdline``. A process is named by its last name other than ``ray::IDLE``
(a Ray worker takes its actor's name, ``ray::WorkerDict``, once it holds one), else by its command
line. The table gives, per process, when it was first and last seen (seconds after the command
started), its CPU seconds (user + system, at its last sample: a process that lives less than one
interval, or whose last interval is missed, is counted short), and, per interval of ``--bins``
seconds, how many of the machine's cores the tree kept busy. Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field

TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Seen:
    """One process as sampled: first and last sample time, CPU seconds at the last, the names it
    went by (in order)."""

    first: float
    last: float = 0.0
    cpu: float = 0.0
    names: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        """Its last name other than ``ray::IDLE`` (a Ray worker takes its actor's name once it holds
        one), else its last."""
        named = [n for n in self.names if n not in ("ray::IDLE", "?")]
        return named[-1] if named else self.names[-1]


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds) of ``pid``, None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    rest = text[text.rfind(")") + 2 :].split()  # the name may hold spaces and parentheses
    return int(rest[1]), (int(rest[11]) + int(rest[12])) / TICKS


def _name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            words = f.read().split(b"\0")
    except OSError:
        return "?"
    line = " ".join(" ".join(w.decode(errors="replace").split()) for w in words if w)  # one line
    if line.startswith("ray::"):
        return line.split()[0]
    return line[:60]


def tree(root: int) -> dict[int, float]:
    """CPU seconds of ``root`` and every process descended from it, by pid."""
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            found = _stat(int(entry))
            if found is not None:
                stats[int(entry)] = found
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    out, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            out[pid] = stats[pid][1]
            todo.extend(children.get(pid, []))
    return out


def sample(command: list[str], every: float) -> tuple[dict[int, Seen], list[tuple[float, float]], float, int]:
    """Run ``command`` and sample its tree: (processes, [(time, CPU seconds of the tree so far)],
    the wall clock, the exit status)."""
    start = time.monotonic()
    child = subprocess.Popen(command)
    seen: dict[int, Seen] = {}
    total: list[tuple[float, float]] = []
    while child.poll() is None:
        now = time.monotonic() - start
        for pid, cpu in tree(child.pid).items():
            process = seen.setdefault(pid, Seen(first=now))
            process.last, process.cpu = now, cpu
            name = _name(pid)
            if not process.names or process.names[-1] != name:
                process.names.append(name)
        total.append((now, sum(p.cpu for p in seen.values())))
        time.sleep(every)
    wall = time.monotonic() - start
    return seen, total, wall, child.returncode


def report(
    seen: dict[int, Seen], total: list[tuple[float, float]], wall: float, bins: float, least: float
) -> str:
    """The per-process table (processes using at least ``least`` CPU seconds, by start) and the busy
    cores per ``bins`` seconds."""
    lines = [f"{'first':>7} {'last':>7} {'CPU s':>7}  process"]
    for process in sorted(seen.values(), key=lambda p: p.first):
        if process.cpu >= least:
            lines.append(f"{process.first:7.1f} {process.last:7.1f} {process.cpu:7.1f}  {process.name}")
    used = sum(p.cpu for p in seen.values())
    lines.append(f"wall {wall:.1f} s; CPU of the tree {used:.1f} s ({used / wall:.2f} cores on average)")
    lines.append("busy cores by interval:")
    edge, prev_t, prev_cpu = bins, 0.0, 0.0
    for t, cpu in total:
        if t >= edge:
            lines.append(f"  {edge - bins:5.0f}-{edge:<5.0f} {(cpu - prev_cpu) / (t - prev_t):5.2f}")
            edge, prev_t, prev_cpu = edge + bins, t, cpu
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--every", type=float, default=0.25, help="sampling interval, seconds")
    parser.add_argument("--bins", type=float, default=5.0, help="seconds per line of the busy-cores profile")
    parser.add_argument("--least", type=float, default=0.5, help="list processes with at least this CPU")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (-- COMMAND [ARGS...])")
    seen, total, wall, status = sample(command, args.every)
    sys.stdout.write(report(seen, total, wall, args.bins, args.least) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
