"""Reward-model, DPO and RLHF loops on a character tokenizer and a tiny GPT: each must learn a toy preference."""

import math

import pytest
import torch
from chat_helpers import TOK

from minillm import batches, chat
from minillm.alignment import loops, pg_losses, reward_model, rlhf
from minillm.model import GPT, GPTConfig

PAD = TOK.index["<|end|>"]

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_gpt(seed=0):
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=len(TOK.vocab), context_length=40, n_layer=2, n_head=2, d_model=32))


def toy_pairs(n, seed):
    """Prompt 'x?' with a chosen reply that says 'yes' and a rejected one that says 'no' (random filler)."""
    g = torch.Generator().manual_seed(seed)
    letters = "bcdfghjklm"
    pairs = []
    for _ in range(n):
        filler = "".join(letters[i] for i in torch.randint(len(letters), (3,), generator=g).tolist())
        prompt = f"{filler}?"
        pairs.append(
            (
                chat.encode_response(prompt, f"yes {filler}.", TOK),
                chat.encode_response(prompt, f"no {filler}.", TOK),
            )
        )
    return pairs


def test_reward_model_learns_a_toy_preference_above_chance_on_held_out_pairs():
    rm = reward_model.ScalarHeadModel(tiny_gpt(1), d_model=32)
    before = [p.detach().clone() for p in rm.parameters()]
    history = loops.train_reward_model(
        rm, toy_pairs(64, seed=0), PAD, steps=40, lr=3e-3, batch_size=16, generator=torch.Generator().manual_seed(0)
    )
    assert history.loss[0] == pytest.approx(math.log(2), abs=1e-6)  # zero head: every reward starts at 0
    accuracy, chosen, rejected = loops.reward_accuracy(rm, toy_pairs(32, seed=1), PAD)
    assert accuracy == 1.0 and torch.all(chosen > rejected)
    changed = {n: not torch.equal(a, b) for (n, b), a in zip(rm.named_parameters(), before, strict=True)}
    # Bradley–Terry sees only reward differences, so the head's bias gets no gradient at all.
    assert changed.pop("head.bias") is False
    assert all(changed.values())


def test_saved_reward_model_loads_back_with_the_same_scores(tmp_path):
    """save_reward_model / load_reward_model: trunk as a model folder plus head.json, scores unchanged."""
    rm = reward_model.ScalarHeadModel(tiny_gpt(), 32)
    with torch.no_grad():
        rm.head.weight.normal_(generator=torch.Generator().manual_seed(1))
        rm.head.bias.fill_(0.3)
    ids, mask = batches.pad_chat([c for c, _ in toy_pairs(4, seed=2)], PAD)
    folder = reward_model.save_reward_model(tmp_path / "rm", rm.eval(), metadata={"made_by": "test"})
    loaded, tokenizer = reward_model.load_reward_model(folder)
    assert tokenizer is None and not loaded.training
    with torch.no_grad():
        assert torch.equal(loaded(ids, mask), rm(ids, mask))
    with pytest.raises(FileNotFoundError, match="head.json"):
        reward_model.load_reward_model(tmp_path / "missing")


def test_dpo_starts_at_ln2_and_learns_the_preference():
    policy, reference = tiny_gpt(2), tiny_gpt(2)
    history = loops.train_dpo(
        policy,
        reference,
        toy_pairs(64, seed=0),
        PAD,
        steps=30,
        lr=3e-3,
        beta=0.1,
        batch_size=16,
        generator=torch.Generator().manual_seed(0),
    )
    assert history.loss[0] == pytest.approx(math.log(2), abs=1e-6)
    assert history.accuracy[0] == 0.0  # strict >: policy == reference ties every pair
    held_out = loops.dpo_metrics(policy, reference, toy_pairs(32, seed=1), PAD, beta=0.1)
    assert held_out["accuracy"] == 1.0 and held_out["margin"] > 0.5 and held_out["loss"] < 0.4


def test_sample_rollouts_masks_the_response_up_to_the_first_end():
    policy = tiny_gpt(3)
    rollout = rlhf.sample_rollouts(
        policy, TOK, ["ab?", "abcd?"], group_size=3, max_new_tokens=12, generator=torch.Generator().manual_seed(0)
    )
    assert rollout.ids.shape[0] == rollout.mask.shape[0] == 6
    for row, prompt, text in zip(range(6), rollout.prompts, rollout.responses, strict=True):
        prompt_ids = chat.encode_prompt(prompt, TOK)
        ids, mask = rollout.ids[row].tolist(), rollout.mask[row].tolist()
        assert ids[: len(prompt_ids)] == prompt_ids and not any(mask[: len(prompt_ids)])
        response = [i for i, m in zip(ids, mask, strict=True) if m]
        assert 1 <= len(response) <= 12
        assert bool(rollout.ended[row]) == (PAD in response)
        if PAD in response:
            assert response.index(PAD) == len(response) - 1  # stops at the first <|end|>, which counts
            response = response[:-1]
        assert TOK.decode(response) == text


def fraction_of_a(rollout):
    return torch.tensor([r.count("a") / max(len(r), 1) for r in rollout.responses])


@pytest.mark.parametrize("advantage", ["gae", "grpo"])
def test_rlhf_raises_a_toy_reward_and_starts_at_zero_kl(advantage):
    policy, reference = tiny_gpt(4), tiny_gpt(4)
    value_model = reward_model.ScalarHeadModel(tiny_gpt(5), d_model=32) if advantage == "gae" else None
    config = rlhf.RLHFConfig(
        advantage=advantage,
        steps=25,
        prompts_per_step=4,
        group_size=4,
        max_new_tokens=8,
        beta=0.01,
        lr=3e-3,
        value_lr=3e-3,
        ppo_epochs=2,
    )
    history = rlhf.train_rlhf(
        policy,
        reference,
        TOK,
        ["ab?", "cd?", "efg?"],
        fraction_of_a,
        config,
        value_model=value_model,
        gold_fn=lambda p, r: float("a" in r),
        generator=torch.Generator().manual_seed(0),
    )
    assert history.kl[0] == 0.0  # identical weights: log π − log π_ref is exactly 0
    first, last = sum(history.reward[:5]) / 5, sum(history.reward[-5:]) / 5
    assert last > first + 0.3, (first, last)
    assert history.kl[-1] > 0 and len(history.gold) == 25


@pytest.mark.parametrize("advantage", ["gae", "grpo"])
@pytest.mark.parametrize("reduction", ["token", "sequence", "constant"])
def test_rlhf_reduces_its_losses_as_the_config_says(advantage, reduction, monkeypatch):
    """Every per-token loss of the update is reduced by pg_losses with the config's reduction, the constant
    one over the response budget (the arithmetic is checked in test_alignment_ppo.py)."""
    seen = []

    def spy(losses, mask, how, max_len=None):
        seen.append((how, max_len))
        return pg_losses.reduce_token_losses(losses, mask, how, max_len)

    monkeypatch.setattr(rlhf, "reduce_token_losses", spy)
    value_model = reward_model.ScalarHeadModel(tiny_gpt(5), d_model=32) if advantage == "gae" else None
    config = rlhf.RLHFConfig(
        advantage=advantage, steps=1, prompts_per_step=2, group_size=2, max_new_tokens=6, ppo_epochs=2,
        reduction=reduction,
    )  # fmt: skip
    generator = torch.Generator().manual_seed(0)
    rlhf.train_rlhf(tiny_gpt(4), tiny_gpt(4), TOK, ["ab?", "cd?"], fraction_of_a, config, value_model, None, generator)
    per_epoch = 2 if advantage == "grpo" else 1  # GRPO also reduces its β·k3 term
    assert seen == [(reduction, 6)] * (2 * per_epoch)


def test_missing_end_penalty_teaches_the_policy_to_stop():
    """A constant reward gives no signal; the penalty alone must raise the share of responses that end."""
    config = rlhf.RLHFConfig(
        advantage="grpo", steps=25, prompts_per_step=4, group_size=4, max_new_tokens=4, beta=0.0, lr=3e-3,
        missing_end_penalty=1.0,
    )  # fmt: skip
    history = rlhf.train_rlhf(
        tiny_gpt(6),
        tiny_gpt(6),
        TOK,
        ["ab?", "cd?", "efg?"],
        lambda rollout: torch.zeros(len(rollout.responses)),
        config,
        generator=torch.Generator().manual_seed(0),
    )
    first, last = sum(history.ended[:5]) / 5, sum(history.ended[-5:]) / 5
    assert last > first + 0.3, (first, last)
    assert history.reward == [0.0] * 25  # the logged reward is the learned one, before the penalty


def test_rlhf_config_rejects_bad_settings():
    with pytest.raises(ValueError, match="missing_end_penalty"):
        rlhf.RLHFConfig(missing_end_penalty=-1.0)
    with pytest.raises(ValueError, match="advantage"):
        rlhf.RLHFConfig(advantage="reinforce")
    with pytest.raises(ValueError, match="group_size"):
        rlhf.RLHFConfig(advantage="grpo", group_size=1)
    with pytest.raises(ValueError, match="reduction must be one of"):
        rlhf.RLHFConfig(reduction="none")  # train_rlhf needs one number to step on
    with pytest.raises(ValueError, match="value_model"):
        rlhf.train_rlhf(tiny_gpt(), tiny_gpt(), TOK, ["a?"], fraction_of_a, rlhf.RLHFConfig(advantage="gae"))
