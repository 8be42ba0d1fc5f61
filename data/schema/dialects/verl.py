"""veRL: its rollout dumps (``trainer.rollout_data_dir``, one file per step, ``120.jsonl``) write input,
output, score, step and gts; its batches name the arrays old_log_probs, ref_log_prob and
token_level_rewards, and its trainer counts global_steps."""

ALIASES: dict[str, tuple[str, ...]] = {
    "prompt": ("input",),
    "response": ("output",),
    "step": ("global_steps",),
    "reward": ("score",),
    "ref_logprobs": ("ref_log_prob",),
    "logprobs": ("old_log_probs",),
    "token_rewards": ("token_level_rewards",),
}
