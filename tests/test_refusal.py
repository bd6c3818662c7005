"""A refusal is a type (`coba_verl.refusal.CobaRefusal`): the entry points print it as one line,
``coba-verl: <message>``, exit 2, wherever it was raised, a Ray actor included; any other error
keeps its traceback and its exit status."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from coba_verl.refusal import REFUSAL_STATUS, CobaRefusal, CobaTypeRefusal, carried_refusal, exit_on_refusal

ROOT = Path(__file__).resolve().parents[1]


def test_the_core_refuses_with_the_refusal_type_and_old_except_clauses_still_catch_it():
    from coba_verl.core import CobaConfig

    with pytest.raises(CobaRefusal, match="coba.strategy='bogus' is unknown") as bad_value:
        CobaConfig.from_mapping({"strategy": "bogus"})
    assert isinstance(bad_value.value, ValueError)
    with pytest.raises(
        CobaTypeRefusal, match=r"coba.min_rollouts='abc' \(str\) must be an integer"
    ) as bad_type:
        CobaConfig.from_mapping({"min_rollouts": "abc"})
    assert isinstance(bad_type.value, TypeError) and isinstance(bad_type.value, CobaRefusal)


def test_a_refusal_prints_one_line_and_exits_2(capsys):
    with pytest.raises(SystemExit) as exit_info, exit_on_refusal():
        raise CobaRefusal("coba.window=0 must be an integer >= 1.\nSet it to 1 or more.")
    assert exit_info.value.code == REFUSAL_STATUS == 2
    assert (
        capsys.readouterr().err == "coba-verl: coba.window=0 must be an integer >= 1. Set it to 1 or more.\n"
    )


@pytest.mark.parametrize(
    "error", [ValueError("invalid literal"), TypeError("unsupported operand"), KeyError("x")]
)
def test_an_error_that_is_not_a_refusal_passes_through_unchanged(error, capsys):
    with pytest.raises(type(error)) as raised, exit_on_refusal():
        raise error
    assert raised.value is error
    assert capsys.readouterr().err == ""


def test_a_refusal_carried_as_a_cause_is_the_one_printed():
    refusal = CobaRefusal("the checkpoint holds other prompts.")
    try:
        try:
            raise refusal
        except CobaRefusal as err:
            raise RuntimeError("while loading the checkpoint") from err
    except RuntimeError as outer:
        assert carried_refusal(outer) is refusal
    assert carried_refusal(RuntimeError("no cause")) is None


def test_rays_carrier_of_a_refusal_prints_the_remote_message_not_its_traceback(capsys):
    """Ray re-raises an actor's error as ``RayTaskError(CobaRefusal)``, an instance of both whose str
    is the remote traceback; the refusal printed is the remote error itself (``.cause``)."""
    from ray.exceptions import RayTaskError

    remote = CobaRefusal("the checkpoint holds other prompts. Start fresh.")
    carried = RayTaskError(
        "TaskRunner.run", "Traceback (most recent call last): ...", remote
    ).as_instanceof_cause()
    assert isinstance(carried, CobaRefusal) and carried_refusal(carried) is remote
    with pytest.raises(SystemExit) as exit_info, exit_on_refusal():
        raise carried
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == "coba-verl: the checkpoint holds other prompts. Start fresh.\n"


#: An entry point whose work runs in a Ray actor, as veRL's TaskRunner and OpenRLHF's trainer do.
ACTOR_SCRIPT = textwrap.dedent(
    """
    import sys

    import ray

    from coba_verl.refusal import CobaRefusal, exit_on_refusal


    @ray.remote(num_cpus=0)
    class Runner:
        def run(self, kind):
            if kind == "refusal":
                raise CobaRefusal("coba.prior_file: file p.jsonl line 2 is not JSON.")
            return {}["missing"]  # a bug: not a refusal


    ray.init(num_cpus=1, include_dashboard=False)
    with exit_on_refusal():
        ray.get(Runner.remote().run.remote(sys.argv[1]))
    """
)


@pytest.mark.slow
def test_in_a_ray_actor_a_refusal_is_one_line_exit_2_and_a_bug_keeps_its_traceback(tmp_path):
    script = tmp_path / "entry.py"
    script.write_text(ACTOR_SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env["RAY_DEDUP_LOGS"] = "0"

    def launch(kind: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(script), kind],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            cwd=tmp_path,
        )

    refused = launch("refusal")
    ours = [line for line in refused.stderr.splitlines() if line.startswith("coba-verl:")]
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert ours == ["coba-verl: coba.prior_file: file p.jsonl line 2 is not JSON."]
    assert "Traceback" not in refused.stderr and "ray::" not in refused.stderr

    bug = launch("bug")
    assert bug.returncode == 1, bug.stderr[-3000:]
    assert "Traceback (most recent call last)" in bug.stderr and "KeyError: 'missing'" in bug.stderr
    assert "coba-verl:" not in bug.stderr
