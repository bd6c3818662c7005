"""A refusal: a setting or an input coba-verl will not run with, and how the entry points report it.

The ground floor of the package (it imports nothing of it). Every check of every layer, the
core's `CobaConfig` as much as the glues' pre-flights, raises `CobaRefusal`, whose message names
the bad value and says what to do. The type is what makes an error a refusal: an error that is
not one (a bug, a library's error, an error of veRL's or OpenRLHF's own) keeps its type, its
traceback and its exit status.

The entry points (``coba-verl train`` / ``python -m coba_verl.main``, ``coba-verl estimate``,
``python -m coba_verl.openrlhf.train``) run under `exit_on_refusal`: a refusal raised there, or in
a Ray actor and carried back by Ray, prints as one line, ``coba-verl: <message>``, on stderr, and
the process exits with `REFUSAL_STATUS` (2, as for a usage error).

`CobaRefusal` is a ValueError, so code that caught the ValueError a check raised before still
catches it; `CobaTypeRefusal` (a value of the wrong type) is a TypeError as well.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

__all__ = [
    "REFUSAL_STATUS",
    "CobaRefusal",
    "CobaTypeRefusal",
    "carried_refusal",
    "exit_on_refusal",
    "refuse",
]

#: Exit status of a refused run (as for a usage error).
REFUSAL_STATUS = 2


class CobaRefusal(ValueError):
    """A setting or input coba-verl refuses, with the bad value and the fix in its message."""


class CobaTypeRefusal(CobaRefusal, TypeError):
    """A refusal of a value of the wrong type (``coba.min_rollouts='abc'``); also a TypeError."""


def refuse(reason: BaseException | str) -> NoReturn:
    """Print ``reason`` as one line, ``coba-verl: <message>``, on stderr and exit with `REFUSAL_STATUS`.

    A message of several lines is joined into one.
    """
    message = " ".join(str(reason).splitlines())
    sys.stderr.write(f"coba-verl: {message}\n")
    sys.exit(REFUSAL_STATUS)


def carried_refusal(error: BaseException) -> CobaRefusal | None:
    """The `CobaRefusal` that ``error`` is or carries (a Ray worker's error, a cause), or None.

    Ray re-raises a remote error as ``RayTaskError(<its type>)``, an instance of both types whose
    str is the remote traceback; the remote error itself is its ``cause``, so a carrier is opened
    before its type is looked at, and the message printed is the remote one.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        remote = getattr(current, "cause", None)  # RayTaskError.cause: the error the worker raised
        if isinstance(remote, BaseException):
            current = remote
        elif isinstance(current, CobaRefusal):
            return current
        else:
            current = current.__cause__
    return None


@contextmanager
def exit_on_refusal() -> Iterator[None]:
    """Around an entry point's run: a refusal raised inside (`carried_refusal`) is `refuse`d; any
    other error propagates unchanged, with its traceback."""
    try:
        yield
    except Exception as error:
        refusal = carried_refusal(error)
        if refusal is None:
            raise
        refuse(refusal)
