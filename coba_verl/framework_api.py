"""The one shape of the framework API guards: what a glue extends, checked when the glue is imported.

Each glue overrides or calls methods of its framework (veRL's V1 trainers, TRL's `GRPOTrainer`,
OpenRLHF's trainer, samples generator and experience maker). A renamed or re-signed method would
otherwise be silently never called: budgets would stop reaching the engine, or the tracker would
stop learning, with no error. So each glue lists them, as a table

    (owner, method name) -> the parameter names coba-verl relies on, in order

and `check_api` holds the installed framework to it when the glue is imported. A missing method or
other parameters is a `FrameworkMismatch`, naming the method, the signature found, the one
expected and the version to install.

Two of the frameworks declare classes coba-verl extends as Ray actors (veRL's ``TaskRunner``,
OpenRLHF's ``PPOTrainer``); `actor_python_class` is the one way to reach the Python class behind
one. A framework object that coba-verl replaces by its own subclass (veRL's dataloader and replay
buffer) is rebuilt from its constructor's signature by `constructor_arguments`.
"""

from __future__ import annotations

import importlib.metadata
import inspect
from collections.abc import Mapping
from typing import Any

from coba_verl.refusal import CobaRefusal

__all__ = [
    "FrameworkMismatch",
    "actor_python_class",
    "check_api",
    "constructor_arguments",
    "installed_version",
    "mismatch",
]

#: Added by Ray's tracing hook to the methods of an actor class (OpenRLHF's trainer is one).
_RAY_TRACE_PARAMETER = "_ray_trace_ctx"


class FrameworkMismatch(CobaRefusal, ImportError):
    """The installed framework is not one whose API coba-verl extends (a refusal, and an ImportError:
    the glue cannot be imported against it)."""


def installed_version(distribution: str) -> str:
    """``distribution``'s installed version, or ``"unknown"`` (a source tree on the path)."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def mismatch(framework: str, distribution: str, tested: str, problem: str) -> FrameworkMismatch:
    """``framework <installed version>: <problem> (tested with ...). Install it: pip install ...``."""
    return FrameworkMismatch(
        f"{framework} {installed_version(distribution)}: {problem} (tested with {framework} {tested}). "
        f"Install it: pip install '{distribution}=={tested}'."
    )


def check_api(
    framework: str, distribution: str, tested: str, expected: Mapping[tuple[Any, str], tuple[str, ...]]
) -> None:
    """Refuse an installed ``framework`` that lacks a method of ``expected`` or changed its parameters.

    Args:
        framework: its name in messages (``"veRL"``).
        distribution: its package name (``"verl"``), for the version and the install line.
        tested: the version coba-verl is tested with.
        expected: (owner, name) -> parameter names, in order; the owner is a class or a module.

    Raises:
        FrameworkMismatch: naming the first method that differs, what was found, what is expected,
            and ``pip install '<distribution>==<tested>'``.
    """
    for (owner, name), parameters in expected.items():
        where = f"{owner.__name__}.{name}"
        member = getattr(owner, name, None)
        if member is None:
            raise mismatch(framework, distribution, tested, f"{where} does not exist; coba-verl extends it")
        signature = inspect.signature(member)
        found = tuple(p for p in signature.parameters if p != _RAY_TRACE_PARAMETER)
        if found != tuple(parameters):
            shown = signature.replace(
                parameters=[p for p in signature.parameters.values() if p.name != _RAY_TRACE_PARAMETER]
            )
            problem = f"{where}{shown} differs from the ({', '.join(parameters)}) that coba-verl extends"
            raise mismatch(framework, distribution, tested, problem)


def actor_python_class(actor: Any) -> type | None:
    """The Python class behind a Ray actor class (``ray.remote(C)`` -> ``C``), or None for anything else.

    Ray refuses a direct subclass of an actor class (``ray/actor.py``); the class it was made from
    stays reachable as ``__ray_actor_class__``, which Ray sets on the class it derives the actor
    class from.
    """
    found = getattr(actor, "__ray_actor_class__", None)
    return found if isinstance(found, type) else None


def constructor_arguments(
    instance: Any, cls: type, framework: str, distribution: str, tested: str, skip: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Every argument of ``cls``'s constructor but ``skip``, read back from ``instance`` (a ``cls``
    that keeps each under its own name), to build a subclass of ``cls`` with the same settings.

    The names come from the signature, so a release that adds a parameter is carried over, or
    refused here when the instance does not keep it under that name: nothing is lost silently.

    Raises:
        FrameworkMismatch: ``instance`` does not expose a constructor parameter, naming it.
    """
    names = [n for n in inspect.signature(cls.__init__).parameters if n not in ("self", *skip)]
    missing = [n for n in names if not hasattr(instance, n)]
    if missing:
        raise mismatch(
            framework,
            distribution,
            tested,
            f"cannot rebuild its {cls.__name__}: it takes {missing} but the {type(instance).__name__} does "
            "not expose them, so they would be lost",
        )
    return {name: getattr(instance, name) for name in names}
