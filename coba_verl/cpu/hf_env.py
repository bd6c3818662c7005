"""The ``hf`` rollout's environment knobs, read by each `HFServer` when it starts (tests and benches).

Request log: with ``COBA_HF_REQUEST_LOG=<dir>`` in the environment, every server appends one JSON
line per request to ``<dir>/requests-<replica>.jsonl``, between lines for the ``sleep``,
``wake_up`` and ``update_weights`` events, so that a test can read each replica's timeline.

Decode pacing: with ``COBA_HF_DECODE_PACE_S=<seconds>`` in the environment, each decoded token of
a batch takes at least that long (an abort cuts the wait short), so that answers are still being
written when veRL aborts generation at a weight update: a slow engine on a tiny model, for tests of
partial rollout. Unset or 0: decoding runs at full speed. Sampling does not depend on it.

Injected failures: with ``COBA_HF_FAIL_RATE=<p>`` in the environment, each request fails with
probability p (a `RuntimeError` from ``generate``, as an engine error reaches veRL's agent loop, which
then marks the session's group ``failure``), drawn from the request's own seed (`injected_failure`),
so a rerun fails the same requests. For tests and benches of what a run does with failed sessions.
Unset or 0: no request fails.
"""

from __future__ import annotations

import hashlib
import math

from coba_verl.refusal import CobaRefusal

#: Environment variable naming a folder where every server appends its requests (JSON lines).
REQUEST_LOG_ENV = "COBA_HF_REQUEST_LOG"
#: Environment variable: the least seconds one decoded token of a batch takes (module docstring).
DECODE_PACE_ENV = "COBA_HF_DECODE_PACE_S"
#: Environment variable: the probability that a request fails (module docstring).
FAIL_RATE_ENV = "COBA_HF_FAIL_RATE"


def decode_pace(value: str | None) -> float:
    """Seconds per decoded token from ``COBA_HF_DECODE_PACE_S`` (unset or empty: 0).

    Raises:
        CobaRefusal: a value that is not a finite number >= 0, named.
    """
    if value is None or not value.strip():
        return 0.0
    try:
        pace = float(value)
    except ValueError:
        pace = float("nan")
    if not math.isfinite(pace) or pace < 0:
        raise CobaRefusal(f"{DECODE_PACE_ENV}={value!r}: the pace is a number of seconds per token >= 0.")
    return pace


def fail_rate(value: str | None) -> float:
    """The probability of an injected failure from ``COBA_HF_FAIL_RATE`` (unset or empty: 0).

    Raises:
        CobaRefusal: a value that is not a number in [0, 1), named.
    """
    if value is None or not value.strip():
        return 0.0
    try:
        rate = float(value)
    except ValueError:
        rate = float("nan")
    if not 0.0 <= rate < 1.0:
        raise CobaRefusal(f"{FAIL_RATE_ENV}={value!r}: the failure rate is a probability in [0, 1).")
    return rate


def injected_failure(seed: int, rate: float) -> bool:
    """Whether the request of sampling seed ``seed`` (`request_seed`) fails at failure rate ``rate``:
    u < rate, u uniform in [0, 1) from a hash of the seed apart from the one sampling uses."""
    if rate <= 0.0:
        return False
    digest = hashlib.blake2b(f"fail|{seed}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2.0**64 < rate
