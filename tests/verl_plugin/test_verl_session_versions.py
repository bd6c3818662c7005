"""`session_versions`: the policy version that finished each session, from veRL's trajectory tags."""

from __future__ import annotations

from coba_verl.verl_plugin.hooks.step_counts import session_versions


def tag(low: int | None, high: int | None, **extra) -> dict:
    """A trajectory tag as veRL's AgentLoopWorkerTQ writes it (agent_loop_tq.py:206-219)."""
    return {"status": "success", "min_global_steps": low, "max_global_steps": high, **extra}


def test_a_session_resumed_under_new_weights_is_dated_after_the_last_weights_that_wrote_it():
    """Weights of step w serve the prompts submitted at step w + 1: a session begun under weights 2
    (submitted at step 3) and finished under weights 3 is of version 4."""
    groups = {"a": {0: "a_0_0", 1: "a_1_0"}}
    tags = {"a_0_0": tag(2, 2), "a_1_0": tag(2, 3)}
    assert session_versions(groups, tags) == {("a", 0): 3, ("a", 1): 4}


def test_a_multi_output_session_takes_the_newest_weights_of_its_outputs():
    groups = {"a": {0: "a_0_1"}}
    tags = {"a_0_0": tag(1, 1), "a_0_1": tag(1, 2)}  # the second turn ran after an update
    assert session_versions(groups, tags) == {("a", 0): 3}


def test_padding_rows_untagged_outputs_and_other_groups_are_left_out():
    groups = {"a": {0: "a_0_0", 1: "a_1_0"}}
    tags = {
        "a_0_0": tag(None, None),  # an engine that reports no weight version: the group's version
        "a_1_0": tag(4, 5),
        "b_0_0": tag(7, 7),  # not being settled
        "pad1f": tag(9, 9, is_padding=True),
    }
    assert session_versions(groups, tags) == {("a", 1): 6}
