"""CapabilityTracker: window semantics, global failure rate, cold start, state round trip, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from coba_verl.core.capability import beta_shape, psi
from coba_verl.core.tracker import CapabilityTracker, pass_rate_records, scores_to_successes
from coba_verl.refusal import CobaRefusal


def test_window_of_one_keeps_only_the_last_appearance():
    tr = CapabilityTracker(10, window=1)
    tr.record([3], [4], [4])
    tr.end_step()
    tr.record([3], [1], [4])
    tr.end_step()
    assert tr.pass_rates([3])[0] == 0.25


def test_window_of_three_pools_rollouts_of_the_last_three_appearances():
    tr = CapabilityTracker(10, window=3)
    for succ, roll in [(8, 8), (0, 4), (2, 4), (1, 2)]:
        tr.record([5], [succ], [roll])
        tr.end_step()
    # last three appearances: (0/4), (2/4), (1/2) -> 3 / 10, pooled over rollouts
    assert tr.pass_rates([5])[0] == pytest.approx(0.3)
    assert tr.last_pass_rates([5])[0] == 0.5


def test_rollouts_of_one_prompt_spread_over_calls_count_as_one_appearance():
    tr = CapabilityTracker(10, window=2)
    tr.record_scores([1, 1, 2], [1.0, 0.0, 1.0])
    tr.record_scores([1, 2], [1.0, 0.0])
    tr.end_step()
    np.testing.assert_allclose(tr.pass_rates([1, 2]), [2 / 3, 1 / 2])
    tr.record([1], [0], [3])
    tr.end_step()
    assert tr.pass_rates([1])[0] == pytest.approx(2 / 6)  # two appearances, not three


def test_unseen_prompt_is_unknown_and_cold_start_shape_is_kappa_minus_two():
    tr = CapabilityTracker(10, window=3, kappa=11.0)
    assert np.isnan(tr.pass_rates([0, 9])).all()
    assert np.isnan(tr.last_pass_rates([0])).all()
    assert (tr.alpha, tr.beta) == (9.0, 2.0)
    assert np.isnan(tr.f_bar)


def test_global_failure_rate_is_the_mean_of_per_prompt_rates_over_the_last_k_steps():
    tr = CapabilityTracker(10, window=2, kappa=11.0)
    tr.record([0, 1], [1, 4], [4, 4])  # rates 0.25, 1.0 -> S = 0.625, F = 0.375 (not pooled 5/8)
    out = tr.end_step()
    assert out["F_t"] == pytest.approx(0.375)
    tr.record([2], [0], [2])  # F = 1.0
    tr.end_step()
    tr.record([3], [2], [2])  # F = 0.0; window 2 -> mean(1.0, 0.0)
    tr.end_step()
    assert tr.f_bar == pytest.approx(0.5)
    assert (tr.alpha, tr.beta) == beta_shape(psi(0.5), 11.0)


def test_reverse_shape_is_driven_by_the_success_rate():
    tr = CapabilityTracker(4, window=1, kappa=11.0)
    tr.record([0], [1], [10])  # F = 0.9
    tr.end_step()
    assert tr.shape() == beta_shape(0.9, 11.0)
    assert tr.shape(reverse=True) == beta_shape(psi(0.1), 11.0)


def test_dapo_minus_one_plus_one_scores_map_to_successes():
    np.testing.assert_array_equal(scores_to_successes([1.0, -1.0, 1.0, 0.5]), [1, 0, 1, 0])
    np.testing.assert_array_equal(scores_to_successes([2.0, 1.0], success_value=2.0), [1, 0])


def test_state_round_trip_restores_everything_including_uncommitted_rollouts():
    rng = np.random.default_rng(0)
    a = CapabilityTracker(50, window=3)
    for _ in range(5):
        ids = rng.choice(50, size=12, replace=False)
        roll = rng.integers(1, 9, size=12)
        a.record(ids, rng.integers(0, roll + 1), roll)
        a.end_step()
    a.record([7], [1], [2])  # pending at checkpoint time
    b = CapabilityTracker(50, window=3)
    b.load_state_dict(a.state_dict())
    ids = np.arange(50)
    np.testing.assert_array_equal(a.pass_rates(ids), b.pass_rates(ids))
    assert (a.alpha, a.beta, a.f_bar, a.steps) == (b.alpha, b.beta, b.f_bar, b.steps)
    assert a.end_step() == b.end_step()
    np.testing.assert_array_equal(a.pass_rates(ids), b.pass_rates(ids))


def test_state_from_another_window_is_refused():
    a = CapabilityTracker(5, window=3)
    with pytest.raises(ValueError, match="window=3 but this run has window=1"):
        CapabilityTracker(5, window=1).load_state_dict(a.state_dict())


def test_empty_step_leaves_state_unchanged():
    tr = CapabilityTracker(5)
    assert tr.end_step() == {}
    assert tr.steps == 0


@pytest.mark.parametrize(
    ("ids", "succ", "roll", "message"),
    [
        ([1], [3], [2], "prompt 1: successes=3 exceeds rollouts=2"),
        ([1], [-1], [2], "counts must be non-negative"),
        ([10], [1], [2], r"prompt id 10 is outside the id space \[0, 10\)"),
        ([-1], [1], [2], r"prompt id -1 is outside the id space \[0, 10\)"),
        ([1, 2], [1], [2, 2], "must have the same length, got 2, 1, 2"),
        ([1.5], [1], [2], "ids must hold integers"),
    ],
)
def test_record_raises_error(ids, succ, roll, message):
    with pytest.raises(ValueError, match=message):
        CapabilityTracker(10).record(ids, succ, roll)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_scores_are_refused(bad):
    with pytest.raises(ValueError, match="score at position 1 is"):
        CapabilityTracker(10).record_scores([1, 2], [1.0, bad])


def test_large_id_space_stays_small():
    tr = CapabilityTracker(1_000_000, window=3)
    state_bytes = sum(v.nbytes for v in tr.state_dict().values() if isinstance(v, np.ndarray))
    assert state_bytes < 48 * 2**20  # 44 MB: successes, rollouts, mean lengths (N, 3), appearances
    ids = np.arange(0, 1_000_000, 97)
    tr.record(ids, np.ones_like(ids), np.full_like(ids, 2))
    tr.end_step()
    assert np.all(tr.pass_rates(ids) == 0.5)


def test_prior_is_one_appearance_that_leaves_the_window_like_an_old_one():
    t = CapabilityTracker(4, window=3, kappa=11.0)
    t.set_prior([0, 1], [3, 0], [8, 4])
    assert t.pass_rates([0, 1, 2])[:2].tolist() == [3 / 8, 0.0] and np.isnan(t.pass_rates([2])[0])
    assert t.f_bar == 1.0 - (3 / 8 + 0.0) / 2  # the records' failure rate drives the first shape
    assert t.steps == 0
    expected = [5 / 12, 6 / 16, 7 / 12]  # (3+2)/(8+4), (3+2+1)/(8+4+4), then the prior has left
    f_values = []
    for (s, r), want in zip([(2, 4), (1, 4), (4, 4)], expected, strict=True):
        t.record([0], [s], [r])
        f_values.append(t.end_step()["F_t"])
        assert t.pass_rates([0])[0] == want
    assert t.f_bar == np.mean(f_values)  # the records' F left the F_t window after k = 3 steps
    assert t.pass_rates([1])[0] == 0.0  # an undrawn prompt keeps its record


def test_priors_survive_a_state_round_trip():
    t = CapabilityTracker(3, window=2)
    t.set_prior([2], [1], [4])
    u = CapabilityTracker(3, window=2)
    u.load_state_dict(t.state_dict())
    assert u.pass_rates([2])[0] == 0.25 and u.f_bar == t.f_bar and u.shape() == t.shape()


@pytest.mark.parametrize(
    ("ids", "succ", "att", "message"),
    [
        ([0], [1], [0], "prompt 0: prior successes=1, attempts=0: attempts must be >= 1"),
        ([0], [-1], [2], "successes must be >= 0"),
        ([1], [5], [4], "prompt 1: prior successes=5, attempts=4: successes exceed attempts"),
        ([7], [1], [2], r"prompt id 7 is outside the id space \[0, 3\)"),
        ([1, 1], [1, 1], [2, 2], "prompt 1 has more than one prior record"),
    ],
)
def test_bad_prior_is_refused_naming_the_record(ids, succ, att, message):
    with pytest.raises(ValueError, match=message):
        CapabilityTracker(3).set_prior(ids, succ, att)


def test_prior_after_a_step_is_refused():
    t = CapabilityTracker(3)
    t.record([0], [1], [2])
    t.end_step()
    with pytest.raises(ValueError, match="before the first step; this tracker has committed 1 steps"):
        t.set_prior([1], [1], [2])


def test_pass_rates_become_records_of_the_stated_weight():
    succ, att = pass_rate_records([0.37, 1.0, 0.0], 8)
    assert succ.tolist() == [3, 8, 0] and att.tolist() == [8, 8, 8]
    for bad in ([1.2], [float("nan")], [-0.1]):
        with pytest.raises(ValueError, match="a pass rate lies in"):
            pass_rate_records(bad, 8)
    with pytest.raises(ValueError, match="weight=0"):
        pass_rate_records([0.5], 0)


def test_mean_length_averages_the_windows_rollouts_and_forgets_old_appearances():
    t = CapabilityTracker(3, window=2)
    t.record_scores([0, 0, 1], [1.0, 0.0, 1.0])
    t.record_lengths([0, 0, 1], [10, 30, 7])
    t.end_step()
    t.record_scores([0, 0, 0, 0], [1.0, 1.0, 0.0, 0.0])
    t.record_lengths([0, 0, 0, 0], [40, 40, 40, 40])
    t.end_step()
    lengths = t.mean_lengths([0, 1, 2])
    assert lengths[0] == (10 + 30 + 4 * 40) / 6 and lengths[1] == 7.0 and np.isnan(lengths[2])
    t.record_scores([0, 0], [1.0, 1.0])  # a third appearance without lengths pushes the first out
    t.end_step()
    assert t.mean_lengths([0])[0] == 40.0


def test_lengths_survive_a_checkpoint_inside_a_step():
    t = CapabilityTracker(2, window=3)
    t.record_scores([1, 1], [1.0, 0.0])
    t.record_lengths([1, 1], [5, 9])
    resumed = CapabilityTracker(2, window=3)
    resumed.load_state_dict(t.state_dict())
    resumed.end_step()
    assert resumed.mean_lengths([1])[0] == 7.0


def test_negative_response_length_is_refused_by_name():
    with pytest.raises(ValueError, match="-3 tokens"):
        CapabilityTracker(2).record_lengths([0], [-3])


def test_a_prompt_whose_answers_were_all_empty_costs_one_token_not_zero():
    tracker = CapabilityTracker(3, window=2)
    tracker.record_lengths([0, 0, 1], [0, 0, 7])
    tracker.record([0, 1], [1, 0], [2, 1])
    tracker.end_step()
    lengths = tracker.mean_lengths([0, 1, 2])
    assert lengths[0] == 1.0 and lengths[1] == 7.0 and np.isnan(lengths[2])


def _random_steps(seed: int, steps: int, num_prompts: int = 40):
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        ids = rng.choice(num_prompts, size=8, replace=False)
        roll = rng.integers(1, 9, size=8)
        yield ids, rng.integers(0, roll + 1), roll


def test_rollouts_versioned_by_their_own_step_give_the_same_f_bar_as_unversioned_ones():
    plain, versioned = CapabilityTracker(40, window=3), CapabilityTracker(40, window=3)
    for step, (ids, succ, roll) in enumerate(_random_steps(1, 7)):
        plain.record(ids, succ, roll)
        versioned.record(ids, succ, roll, versions=step + 1)  # veRL numbers its steps from 1
        assert plain.end_step() == versioned.end_step()
        assert plain.f_bar == versioned.f_bar and plain.shape() == versioned.shape()


def test_failure_rate_follows_the_generating_version_across_commits():
    t = CapabilityTracker(10, window=2)
    t.record([0, 1], [1, 0], [2, 2], versions=[5, 5])  # version 5: rates 0.5, 0.0 so far
    t.record([2], [2], [2], versions=6)  # version 6: rate 1.0
    out = t.end_step()
    assert out["F_t"] == pytest.approx(1 - (0.5 + 0.0 + 1.0) / 3)  # the step's own rollouts
    assert t.f_bar == pytest.approx(((1 - 0.25) + (1 - 1.0)) / 2)
    t.record([3], [1], [1], versions=5)  # the rest of version 5 finishes one update later
    t.end_step()
    assert t.f_bar == pytest.approx(((1 - (0.5 + 0.0 + 1.0) / 3) + 0.0) / 2)
    t.record([4], [0], [4], versions=7)  # a third version: 5 leaves the window of k = 2
    t.end_step()
    assert t.f_bar == pytest.approx((0.0 + 1.0) / 2)
    t.record([5], [0], [4], versions=4)  # older than the window's versions: pass rate only
    t.end_step()
    assert t.f_bar == pytest.approx(0.5) and t.pass_rates([5])[0] == 0.0


@pytest.mark.parametrize("versions, message", [([-1], "versions are >= 0"), ([1, 2], "one entry per record")])
def test_bad_generating_version_is_refused_by_value(versions, message):
    with pytest.raises(ValueError, match=message):
        CapabilityTracker(4).record([0], [1], [2], versions=versions)


def test_state_round_trip_keeps_the_versions_of_uncommitted_rollouts():
    a = CapabilityTracker(10, window=2)
    a.record([0], [1], [2], versions=3)
    a.end_step()
    a.record([1], [0], [2], versions=3)  # pending at checkpoint time, of an older version
    a.record([2], [2], [2])  # and one of the committing step
    b = CapabilityTracker(10, window=2)
    b.load_state_dict(a.state_dict())
    assert a.end_step() == b.end_step() and a.f_bar == b.f_bar


def test_a_state_written_before_versions_resumes_with_the_same_f_bar_and_next_steps():
    new = CapabilityTracker(40, window=3)
    new.set_prior([0, 1], [3, 0], [8, 4])
    ring = np.full(3, np.nan)
    ring[2] = new.f_bar  # version 2 kept the priors' F in slot k - 1 until step k - 1
    steps = list(_random_steps(2, 7))
    for step, (ids, succ, roll) in enumerate(steps[:5]):
        new.record(ids, succ, roll)
        ring[step % 3] = new.end_step()["F_t"]
        state = new.state_dict()
        old = {key: value for key, value in state.items() if not key.startswith("fail_")}
        old.update(version=2, fail_window=ring.copy())
        del old["pending_versions"]
        resumed = CapabilityTracker(40, window=3)
        resumed.load_state_dict(old)
        assert resumed.f_bar == pytest.approx(new.f_bar)
    for ids, succ, roll in steps[5:]:
        for t in (new, resumed):
            t.record(ids, succ, roll)
        assert resumed.end_step() == pytest.approx(new.end_step())


# ---------------------------------------------------------------------- versions still in flight
def _async_dapo_run(seed: int, versions: int = 10, prompts: int = 16):
    """Groups of an asynchronous DAPO run, each ``(version, prompt id, successes, budget, arrival)``:
    version v submits ``prompts`` groups; all-pass and all-fail groups are evicted (and scored) at the
    step that generated them, groups with a reward spread are trained one or two steps later."""
    rng = np.random.default_rng(seed)
    groups = []
    for version in range(1, versions + 1):
        p = rng.beta(0.6, 0.6, size=prompts)  # many prompts near 0 or 1, as in a math set
        budgets = rng.integers(2, 9, size=prompts)
        for j in range(prompts):
            successes = int(rng.binomial(budgets[j], p[j]))
            settled_now = successes in (0, budgets[j])
            arrival = version if settled_now else version + int(rng.integers(1, 3))
            groups.append((version, version * prompts + j, successes, int(budgets[j]), arrival))
    return groups


def _complete_f_bar(groups, step: int, window: int) -> float:
    """F_bar over the ``window`` newest versions all of whose groups, and all older ones', have
    arrived by ``step``; F_v = 1 - mean over the version's groups of successes / budget. Plain loops."""
    complete = []
    for version in sorted({g[0] for g in groups}):
        if all(g[4] <= step for g in groups if g[0] <= version):
            complete.append(version)
    failure = []
    for version in complete[-window:]:
        rates = [g[2] / g[3] for g in groups if g[0] == version]
        failure.append(1.0 - sum(rates) / len(rates))
    return sum(failure) / len(failure) if failure else float("nan")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_f_bar_counts_a_version_once_all_its_groups_are_scored_under_async_dapo(seed):
    """All-pass and all-fail groups of the newest version reach the tracker first; with that version
    held open until its groups with a reward spread are trained, F_bar is the mean of complete F_v.
    Averaging the partial newest version in (no version held open) misses it."""
    groups = _async_dapo_run(seed)
    held, naive = CapabilityTracker(200, window=3), CapabilityTracker(200, window=3)
    missed = 0.0
    for step in range(1, 11):
        arrived = [g for g in groups if g[4] == step]
        for tracker in (held, naive):
            for version, prompt, successes, budget, _ in arrived:
                tracker.record([prompt], [successes], [budget], versions=version)
        in_flight = [g[0] for g in groups if g[4] > step and g[0] <= step]
        held.hold_open(min(in_flight) if in_flight else None)
        held.end_step()
        naive.end_step()
        truth = _complete_f_bar(groups, step, window=3)
        if np.isnan(truth):
            assert np.isnan(held.f_bar)
        else:
            assert held.f_bar == pytest.approx(truth)
            missed = max(missed, abs(naive.f_bar - truth))
    assert missed > 0.02  # the scenario does bias a full vote for the newest, partial version


def test_an_open_version_keeps_all_its_rollouts_and_joins_f_bar_once_complete():
    t = CapabilityTracker(10, window=2)
    for version in (1, 2, 3):
        t.record([version], [version - 1], [2], versions=version)  # F_v = 1 - (v - 1) / 2
    t.hold_open(2)  # a group of version 2 is still in flight
    out = t.end_step()
    assert t.f_bar_versions == (1,) and t.f_bar == pytest.approx(1.0)
    assert out["F_bar"] == t.f_bar and out["F_open_versions"] == 2
    t.record([4], [0], [2], versions=2)  # version 2's last group: rates 0.5 and 0.0
    t.hold_open(None)
    t.end_step()
    assert t.f_bar_versions == (2, 3)
    assert t.f_bar == pytest.approx(((1 - 0.25) + (1 - 1.0)) / 2)


def test_state_round_trip_keeps_the_open_versions():
    a = CapabilityTracker(10, window=2)
    a.record([0, 1], [1, 2], [2, 2], versions=[4, 5])
    a.hold_open(5)
    a.end_step()
    b = CapabilityTracker(10, window=2)
    b.load_state_dict(a.state_dict())
    assert b.f_bar_versions == a.f_bar_versions == (4,) and b.f_bar == a.f_bar
    for t in (a, b):
        t.record([2], [0], [2], versions=5)
        t.end_step()
    assert a.f_bar_versions == b.f_bar_versions == (4,)  # 5 stays open until told otherwise


def test_negative_open_version_is_refused_by_value():
    with pytest.raises(CobaRefusal, match="oldest open policy version -3 is negative"):
        CapabilityTracker(4).hold_open(-3)


def test_a_state_written_before_open_versions_resumes_with_every_version_complete():
    a = CapabilityTracker(10, window=2)
    a.record([0, 1], [1, 2], [2, 2], versions=[4, 5])
    a.end_step()
    old = {key: value for key, value in a.state_dict().items() if key != "open_from"}
    old["version"] = 3
    b = CapabilityTracker(10, window=2)
    b.hold_open(4)
    b.load_state_dict(old)
    assert b.f_bar_versions == (4, 5) and b.f_bar == a.f_bar
