"""bench/process_timeline.py: a grandchild's CPU is found and named, the command's status kept."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "process_timeline.py"

#: A child that starts a grandchild spinning for 0.8 s of CPU, then exits with status 3.
BUSY = (
    "import subprocess, sys;"
    "subprocess.run([sys.executable, '-c', "
    "'import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.8: pass']);"
    "sys.exit(3)"
)


def test_timeline_counts_a_grandchilds_cpu_by_name_and_returns_the_commands_status():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--every", "0.05", "--least", "0.3", "--", sys.executable, "-c", BUSY],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 3, done.stderr
    rows = [line.split(None, 3) for line in done.stdout.splitlines()[1:] if line[:1] == " "]
    spinner = [row for row in rows if len(row) == 4 and "-c import time" in row[3]]  # not its parent
    assert spinner, done.stdout
    first, last, cpu = (float(value) for value in spinner[0][:3])
    assert 0.5 <= cpu <= 1.2 and first <= last, done.stdout
    assert "wall " in done.stdout and "busy cores by interval:" in done.stdout
