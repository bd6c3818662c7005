"""`RolloutLedger`: the fate of every rollout a run generates, one record per prompt group.

A group is opened when its prompt is submitted with a budget B_i; each of its B_i sessions is then
in flight until it is given exactly one fate:

==========  =====================================================================================
trained     the session's rows reached an update
cut         finished, scored into the tracker, removed from a trained group to meet the step's
            rollout target (DAPO's cut group, docs/verl.md "What a step costs")
evicted     finished, scored into the tracker, its group cleared untrained (DAPO's filter, surplus,
            staleness, a refilled failed group)
failed      never finished (the engine raised, or the group came back without it)
==========  =====================================================================================

So, for every step and for the run, by construction::

    in flight before + generated  =  trained + cut + evicted + failed + in flight after

`close_step` checks it and returns the step's `StepTally`, from which the ``coba/`` counters are
read. A second fate for a session, a session id outside [0, B_i) (the engine did not honour the
budget), or a group submitted twice is an error naming the group: nothing is counted twice and
nothing is dropped silently.

Each group also carries the policy version that generated it, so that a trainer whose generation
runs ahead of its updates can say how far behind the outcomes it trains and scores are
(``versions behind`` = the update's version minus the generating one).

The ledger knows no framework: a glue opens groups where it submits prompts and settles sessions
where its data flow decides them (the veRL glue: `CobaTrainer` and `CobaReplayBuffer`).
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


class Fate(str, enum.Enum):
    """What became of one session (module docstring)."""

    TRAINED = "trained"
    CUT = "cut"
    EVICTED = "evicted"
    FAILED = "failed"


#: Fates whose session finished and was scored into the tracker.
SCORED = (Fate.TRAINED, Fate.CUT, Fate.EVICTED)


class LedgerError(RuntimeError):
    """A session given two fates, a session outside its group's budget, or an unknown group."""


@dataclass
class GroupRecord:
    """One prompt group: its tracker id, budget B_i, generating version and each session's fate.

    Sessions absent from ``fates`` are in flight.
    """

    uid: str
    prompt_id: int
    budget: int
    version: int
    fates: dict[int, Fate] = field(default_factory=dict)

    @property
    def in_flight(self) -> int:
        """Sessions of the group with no fate yet."""
        return self.budget - len(self.fates)


@dataclass
class StepTally:
    """What one step did to the ledger (sessions unless named otherwise).

    Attributes:
        generated: sessions submitted this step (sum of the opened groups' B_i).
        sessions: sessions given each fate this step.
        groups: groups with at least one session of each fate this step.
        tokens: response tokens of the sessions given each scored fate this step.
        in_flight_before, in_flight_after: sessions in flight when the step began and ended.
        versions_behind: for each trained session, the step's version minus its generating one.
        evicted_budgets: B_i of each group with a session evicted this step (do the big groups get
            dropped?); a group none of whose sessions finished is failed, not evicted, so not here.
    """

    generated: int = 0
    sessions: Counter = field(default_factory=Counter)
    groups: Counter = field(default_factory=Counter)
    tokens: Counter = field(default_factory=Counter)
    in_flight_before: int = 0
    in_flight_after: int = 0
    versions_behind: list[int] = field(default_factory=list)
    evicted_budgets: list[int] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """Flat counters: ``{fate}_rollouts``, ``{fate}_groups`` for trained and evicted, and more."""
        out = {
            "rollouts_generated": self.generated,
            "in_flight_rollouts": self.in_flight_after,
            "tokens_generated": sum(self.tokens[fate] for fate in SCORED),
        }
        for fate in Fate:
            out[f"{fate.value}_rollouts"] = self.sessions[fate]
        out["trained_groups"] = self.groups[Fate.TRAINED]
        out["evicted_groups"] = self.groups[Fate.EVICTED]
        return out

    def balanced(self) -> bool:
        """in flight before + generated == the four fates + in flight after."""
        settled = sum(self.sessions[fate] for fate in Fate)
        return self.in_flight_before + self.generated == settled + self.in_flight_after


class RolloutLedger:
    """Open groups and this step's tally (module docstring).

    Example, B = [3, 2]::

        ledger.open_group("a", prompt_id=7, budget=3, version=0)
        ledger.open_group("b", prompt_id=2, budget=2, version=0)
        ledger.settle("a", {0: 12, 2: 9}, Fate.TRAINED, close=True)   # session 1 failed
        ledger.settle("b", {0: 4}, Fate.CUT)                          # b's session 1 in flight
        ledger.close_step().counts()
        # generated 5, trained 2, cut 1, failed 1, in flight 1
    """

    def __init__(self, overrun_hint: str = "") -> None:
        """``overrun_hint``: the glue's sentence on how its engine reads a group's budget, added to the
        error for a session outside [0, B_i)."""
        self.overrun_hint = overrun_hint
        self.groups: dict[str, GroupRecord] = {}  # open groups by uid
        self.tally = StepTally()

    # ------------------------------------------------------------------ writes
    def open_group(self, uid: str, prompt_id: int, budget: int, version: int) -> None:
        """A group of ``budget`` sessions submitted for tracker id ``prompt_id`` by policy ``version``.

        Raises:
            LedgerError: ``uid`` is already open, or ``budget`` < 1.
        """
        if uid in self.groups:
            raise LedgerError(f"prompt group uid={uid} was submitted twice; its rollouts would count twice.")
        if int(budget) < 1:
            raise LedgerError(f"prompt group uid={uid} was submitted with budget {budget}; B_i is >= 1.")
        self.groups[uid] = GroupRecord(uid, int(prompt_id), int(budget), int(version))
        self.tally.generated += int(budget)

    def knows(self, uid: str) -> bool:
        """Whether ``uid`` is an open group (one submitted through the ledger and not yet closed)."""
        return uid in self.groups

    def settle(
        self,
        uid: str,
        tokens: Mapping[int, int],
        fate: Fate,
        *,
        close: bool = False,
        version: int | None = None,
    ) -> GroupRecord:
        """Give ``fate`` to the finished sessions ``tokens`` (session -> response tokens) of ``uid``.

        With ``close``, every session of the group still in flight is failed and the group leaves
        the ledger: a group is closed when it is trained or evicted, since nothing more of it can
        arrive. ``version`` (the step's) adds each trained session's versions behind to the tally.

        Returns:
            The group's record (its fates as they now stand).

        Raises:
            LedgerError: ``uid`` is not open; a session outside [0, B_i) (the rollout engine did not
                honour the budget); a session that already has a fate.
        """
        group = self.groups.get(uid)
        if group is None:
            raise LedgerError(f"prompt group uid={uid} is not open: it was never submitted or is closed.")
        outside = sorted(s for s in tokens if not 0 <= s < group.budget)
        if outside:
            raise LedgerError(
                f"prompt group uid={uid} finished sessions {outside} but was allocated B_i={group.budget} "
                f"rollouts: the rollout engine did not honour the budget. {self.overrun_hint}".rstrip()
            )
        twice = sorted(s for s in tokens if s in group.fates)
        if twice:
            already = group.fates[twice[0]].value
            raise LedgerError(
                f"prompt group uid={uid}: sessions {twice} are already {already}; a session cannot also be "
                f"{fate.value}."
            )
        if fate is Fate.FAILED and any(tokens.values()):
            raise LedgerError(f"prompt group uid={uid}: a failed session has no tokens, got {dict(tokens)}.")
        for session, count in tokens.items():
            group.fates[session] = fate
            self.tally.tokens[fate] += int(count)
        if tokens:
            self.tally.sessions[fate] += len(tokens)
            self.tally.groups[fate] += 1
            if fate is Fate.EVICTED:  # counted as evicted_groups counts it: a session was scored
                self.tally.evicted_budgets.append(group.budget)
        if fate is Fate.TRAINED and version is not None:
            self.tally.versions_behind.extend([int(version) - group.version] * len(tokens))
        if close:
            self._close(group)
        return group

    def fail_open(self) -> int:
        """Close every open group, failing its sessions in flight (a synchronous step's end: nothing
        it submitted can still arrive). Returns the sessions failed."""
        failed = sum(group.in_flight for group in self.groups.values())
        for group in list(self.groups.values()):
            self._close(group)
        return failed

    def close_step(self) -> StepTally:
        """The step's tally, checked to balance; the next step's begins with what is in flight now.

        Raises:
            LedgerError: the tally does not balance (a defect of this class, never of the input).
        """
        tally = self.tally
        tally.in_flight_after = self.in_flight
        if not tally.balanced():
            raise LedgerError(f"rollout ledger does not balance: {tally}")
        self.tally = StepTally(in_flight_before=tally.in_flight_after)
        return tally

    def _close(self, group: GroupRecord) -> None:
        rest = [s for s in range(group.budget) if s not in group.fates]
        if rest:
            for session in rest:
                group.fates[session] = Fate.FAILED
            self.tally.sessions[Fate.FAILED] += len(rest)
            self.tally.groups[Fate.FAILED] += 1
        del self.groups[group.uid]

    # ------------------------------------------------------------------ reads
    @property
    def in_flight(self) -> int:
        """Sessions submitted and not yet given a fate."""
        return sum(group.in_flight for group in self.groups.values())

    def prompt_of(self, uid: str) -> int:
        """The tracker id of open group ``uid``."""
        return self.groups[uid].prompt_id

    def open_uids(self, uids: Iterable[str]) -> list[str]:
        """The ``uids`` that are open groups, in the order given."""
        return [uid for uid in uids if uid in self.groups]

    # ------------------------------------------------------------------ resume
    def reopen(self, uid: str, prompt_id: int, budget: int, version: int) -> None:
        """A group restored from a checkpoint, still without a fate: in flight since before this step
        (it was counted as generated by the run that submitted it, so it is not counted again).

        Raises:
            LedgerError: ``uid`` is already open, or ``budget`` < 1.
        """
        self.open_group(uid, prompt_id, budget, version)
        self.tally.generated -= int(budget)
        self.tally.in_flight_before += int(budget)

    def restart(self, uid: str, version: int) -> None:
        """Open group ``uid`` generates again from policy ``version`` (a resumed run re-issues the
        groups that were in flight); its sessions stay in flight, counted once."""
        self.groups[uid].version = int(version)
