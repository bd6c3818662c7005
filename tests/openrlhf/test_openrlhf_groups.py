"""Group baselines over variable groups against OpenRLHF 0.11.2's own `compute_advantages_and_returns`."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

ESTIMATORS = ["group_norm", "dr_grpo", "rloo", "reinforce_baseline"]


def make_args(estimator: str, n: int) -> SimpleNamespace:
    ns = SimpleNamespace
    return ns(
        algo=ns(advantage=ns(estimator=estimator, gamma=1.0, lambd=1.0, no_std_norm=False)),
        rollout=ns(n_samples_per_prompt=n, max_new_tokens=4),
        reward=ns(overlong_buffer_len=None, stop_properly_penalty_coef=None, clip_range=(-10, 10)),
        data=ns(max_len=8),
    )


def make_experiences(rewards: list[float], micro: int = 3) -> list:
    """Micro-batches of ``micro`` samples (the last may be shorter), 3 action tokens each; index = row."""
    from openrlhf.trainer.ppo_utils.experience import Experience

    out = []
    for start in range(0, len(rewards), micro):
        part = rewards[start : start + micro]
        b = len(part)
        out.append(
            Experience(
                action_mask=torch.ones(b, 3, dtype=torch.bool),
                kl=torch.zeros(b, 3),
                rewards=torch.tensor(part),
                index=list(range(start, start + b)),
                info={"reward": torch.tensor(part)},
            )
        )
    return out


def maker(cls, args):
    from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController

    return cls(None, None, None, None, FixedKLController(0.0), SimpleNamespace(args=args), None)


def round_of(budgets: list[int]):
    from coba_verl.records.rounds import Round

    b = np.asarray(budgets)
    return Round(ids=np.arange(b.size), allocation=SimpleNamespace(budgets=b))


def advantages(experiences) -> torch.Tensor:
    return torch.cat([e.advantages[:, 0] for e in experiences])


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_grouped_path_on_equal_groups_gives_upstreams_advantages(orl, estimator):
    """The variable-group path (taken because n differs from the budgets) equals upstream's reshape."""
    from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker

    from coba_verl.openrlhf.groups import CobaExperienceMaker

    rewards = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.5, 1.0, 0.0, 0.0, 1.0, 0.25]  # 3 groups of 4
    expected = maker(RemoteExperienceMaker, make_args(estimator, 4)).compute_advantages_and_returns(
        make_experiences(rewards)
    )
    args = make_args(estimator, 3)  # 12 samples = 4 prompts x 3, but budgets [4, 4, 4]
    ours = maker(CobaExperienceMaker, args)
    ours.round = round_of([4, 4, 4])
    got = ours.compute_advantages_and_returns(make_experiences(rewards))
    torch.testing.assert_close(advantages(got), advantages(expected), rtol=0, atol=1e-6)
    torch.testing.assert_close(
        torch.cat([e.info["group_reward_std"] for e in got]),
        torch.cat([e.info["group_reward_std"] for e in expected]),
    )
    assert args.algo.advantage.estimator == estimator and args.rollout.n_samples_per_prompt == 3  # restored


@pytest.mark.parametrize("group_weight", ["proportional", "equal"])  # equal: every factor is exactly 1
@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_uniform_round_is_upstreams_method_unchanged(orl, estimator, group_weight):
    from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker

    from coba_verl.openrlhf.groups import CobaExperienceMaker

    rewards = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.5, 1.0]
    expected = maker(RemoteExperienceMaker, make_args(estimator, 4)).compute_advantages_and_returns(
        make_experiences(rewards)
    )
    ours = maker(CobaExperienceMaker, make_args(estimator, 4))
    ours.round, ours.group_weight = round_of([4, 4]), group_weight
    got = ours.compute_advantages_and_returns(make_experiences(rewards))
    assert torch.equal(torch.cat([e.advantages for e in got]), torch.cat([e.advantages for e in expected]))


def test_variable_groups_are_centred_per_group_where_upstream_is_not(orl):
    """Budgets [6, 2]: group_norm advantages have mean 0 and std 1 within each group."""
    from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker

    from coba_verl.openrlhf.groups import CobaExperienceMaker

    rewards = [1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]  # group 0: 6 samples, p = 1/2; group 1: [0, 1]
    ours = maker(CobaExperienceMaker, make_args("group_norm", 4))
    ours.round = round_of([6, 2])
    adv = advantages(ours.compute_advantages_and_returns(make_experiences(rewards)))
    for part in (adv[:6], adv[6:]):
        assert abs(float(part.mean())) < 1e-6
        assert float(part.std()) == pytest.approx(1.0, abs=1e-6)
    r = torch.tensor(rewards)
    torch.testing.assert_close(adv[:6], (r[:6] - r[:6].mean()) / (r[:6].std() + 1e-9))
    upstream = advantages(
        maker(RemoteExperienceMaker, make_args("group_norm", 4)).compute_advantages_and_returns(
            make_experiences(rewards)
        )
    )
    assert abs(float(upstream[:6].mean())) > 0.1  # reshape(-1, 4) mixes the groups


def test_equal_group_weight_scales_each_groups_advantages_to_the_same_total(orl):
    """Budgets [6, 2], N = 8, M = 2: equal multiplies group 0 by (8/2)/6 and group 1 by (8/2)/2."""
    from coba_verl.openrlhf.groups import CobaExperienceMaker

    rewards = [1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    plain = maker(CobaExperienceMaker, make_args("dr_grpo", 4))
    plain.round = round_of([6, 2])
    expected = advantages(plain.compute_advantages_and_returns(make_experiences(rewards)))
    ours = maker(CobaExperienceMaker, make_args("dr_grpo", 4))
    ours.round, ours.group_weight = round_of([6, 2]), "equal"
    got = ours.compute_advantages_and_returns(make_experiences(rewards))
    factors = torch.tensor([4 / 6] * 6 + [4 / 2] * 2)
    torch.testing.assert_close(advantages(got), expected * factors)
    assert float(factors[:6].sum()) == pytest.approx(4.0) and float(factors[6:].sum()) == pytest.approx(4.0)
    assert all(e.advantages.shape == (len(e.index), 3) for e in got)  # every token of a sample alike
    torch.testing.assert_close(torch.cat([e.advantages for e in got]), advantages(got)[:, None].expand(-1, 3))


def test_rloo_over_variable_groups_is_leave_one_out(orl):
    from coba_verl.openrlhf.groups import grouped_rewards

    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0])
    group = torch.tensor([0, 0, 0, 1, 1])
    shaped, std = grouped_rewards(r, group, "rloo")
    torch.testing.assert_close(shaped, torch.tensor([1 - 0.0, 0 - 0.5, 0 - 0.5, 0.0, 0.0]))
    torch.testing.assert_close(std, torch.tensor([r[:3].std()] * 3 + [0.0, 0.0]))


def test_make_experience_records_raw_scores_in_round_order(orl, monkeypatch):
    from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker

    from coba_verl.openrlhf.groups import CobaExperienceMaker

    experiences = make_experiences([0.0, 1.0, 1.0, 0.0, 1.0])
    experiences.reverse()  # any order: positions come from each sample's index
    monkeypatch.setattr(RemoteExperienceMaker, "make_experience", lambda self, samples: samples)
    ours = maker(CobaExperienceMaker, make_args("group_norm", 4))
    ours.make_experience(experiences)
    np.testing.assert_array_equal(ours.raw_scores, [0.0, 1.0, 1.0, 0.0, 1.0])


def test_an_engine_answer_of_the_wrong_size_or_prompt_is_refused_naming_the_values(orl):
    from coba_verl.openrlhf.generator import IdentifiedPrompt, check_group

    prompt = IdentifiedPrompt("1+1=", 7)
    check_group(prompt, 2, [{"prompt": "1+1="}, {"prompt": "1+1="}])
    with pytest.raises(
        RuntimeError, match=r"prompt id 7 was sent with n_samples_per_prompt=3 but .* returned 2"
    ):
        check_group(prompt, 3, [{"prompt": "1+1="}, {"prompt": "1+1="}])
    with pytest.raises(
        RuntimeError, match=r"response 1 of prompt id 7's request belongs to another prompt \('2\+2='"
    ):
        check_group(prompt, 2, [{"prompt": "1+1="}, {"prompt": "2+2="}])
