"""Prompt groups as veRL's V1 trainer stores them: trajectory keys ``{uid}_{session}_{output}``.

veRL's agent loop writes one key per output of each session of a prompt (``AgentLoopWorkerTQ``,
``verl/trainer/ppo/v1/agent_loop_tq.py``); multi-turn loops write several outputs per session and
the final one carries the score. A session that raised writes nothing, and its group is tagged
``failure`` but still trained on (sync mode pads downstream), or evicted and refilled under
``trainer.v1.sampler.sync_refill_failed_groups``. ``_balance_batch`` adds ``pad<hex>`` rows
tagged ``is_padding``.

From these facts, what the ledger (`coba_verl.records.ledger`) is told of a group allocated B_i
rollouts: its finished sessions, by id; a session id >= B_i means the engine ignored
``__rollout_n__`` (an error); the sessions in [0, B_i) that never came back are failed when the
group is closed (counted, never fatal).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np


def split_key(key: str) -> tuple[str, int, int]:
    """A trajectory key's (uid, session, output): ``"uid0_3_1"`` -> ``("uid0", 3, 1)``."""
    uid, session, output = key.rsplit("_", 2)
    return uid, int(session), int(output)


def uid_of(key: str) -> str:
    """A trajectory key's prompt group (uid); a padding row's key (``pad<hex>``) is its own."""
    return key.rsplit("_", 2)[0]


def final_outputs(keys: Iterable[str], tags: Iterable[Mapping] | None = None) -> dict[str, dict[int, str]]:
    """``uid -> {session: key of the session's last output}``, padding rows left out.

    Keys of one output each: ``uid0_3_0`` is session 3 of ``uid0``; ``uid0_3_1`` its second output.
    """
    keys = list(keys)
    tags = [{}] * len(keys) if tags is None else list(tags)
    groups: dict[str, dict[int, tuple[int, str]]] = {}
    for key, tag in zip(keys, tags, strict=True):
        if tag.get("is_padding", False):
            continue
        uid, session, output = split_key(key)
        sessions = groups.setdefault(uid, {})
        if session not in sessions or sessions[session][0] < output:
            sessions[session] = (output, key)
    return {uid: {s: key for s, (_, key) in sessions.items()} for uid, sessions in groups.items()}


def sessions_of(keys: Iterable[str]) -> dict[str, dict[int, list[str]]]:
    """``uid -> {session: every key of the session}``: ``["a_0_0", "a_0_1", "a_1_0"]`` ->
    ``{"a": {0: ["a_0_0", "a_0_1"], 1: ["a_1_0"]}}``."""
    groups: dict[str, dict[int, list[str]]] = {}
    for key in keys:
        uid, session, _ = split_key(key)
        groups.setdefault(uid, {}).setdefault(session, []).append(key)
    return groups


def session_tokens(groups: Mapping[str, Mapping[int, str]], tags: Mapping[str, Mapping]) -> np.ndarray:
    """Response tokens of each session of ``groups`` (``uid -> {session: final key}``), summed over
    the session's outputs in ``tags`` (``key -> tag`` with veRL's ``response_len``), in the order
    the sessions are listed: ``{"a": {0: "a_0_1"}}`` with tags a_0_0 (3 tokens), a_0_1 (5) -> [8]."""
    per_session: dict[tuple[str, int], int] = {}
    for key, tag in tags.items():
        if tag.get("is_padding", False):
            continue
        uid, session, _ = split_key(key)
        if uid in groups and session in groups[uid]:
            per_session[uid, session] = per_session.get((uid, session), 0) + int(tag.get("response_len", 0))
    order = [(uid, session) for uid, sessions in groups.items() for session in sessions]
    return np.asarray([per_session.get(pair, 0) for pair in order], dtype=np.int64)
