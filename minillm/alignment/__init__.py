"""Alignment: turning a chat model into one that prefers what people (or a scorer) prefer.

One file per idea, read in this order:

- :mod:`~minillm.alignment.logprobs` — log-probabilities of a response, entropy, masked sums and means;
- :mod:`~minillm.alignment.kl` — per-token KL estimators (k1, k2, k3) against a frozen reference;
- :mod:`~minillm.alignment.reward_model` — a transformer with a scalar head, Bradley–Terry loss;
- :mod:`~minillm.alignment.advantages` — GAE (with a value head) and GRPO group-normalised advantages;
- :mod:`~minillm.alignment.ppo` — the clipped surrogate and the KL-penalised per-token reward;
- :mod:`~minillm.alignment.rlhf` — the RLHF loop: sample rollouts, score them, PPO or GRPO updates;
- :mod:`~minillm.alignment.pg_losses` — per-token policy-gradient losses (REINFORCE, clipped) and their reductions;
- :mod:`~minillm.alignment.dpo` — direct preference optimisation from pairs, no reward model;
- :mod:`~minillm.alignment.loops` — the reward-model and DPO training loops over preference pairs.

Prompt–response sequences are encoded and padded by the chat format, :mod:`minillm.chat`.

Import the submodules explicitly (``from minillm.alignment import dpo``).
"""
