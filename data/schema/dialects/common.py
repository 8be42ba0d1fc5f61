"""Names that several trainers and hand-written loggers use for the contract's fields."""

ALIASES: dict[str, tuple[str, ...]] = {
    "prompt": ("query", "question"),
    "response": ("completion",),
    "step": ("global_step", "train_step", "iteration"),
    "reward": ("score",),
    "response_tokens": ("tokens",),
    "ref_logprobs": ("ref_logps", "reference_logprobs", "ref_log_probs"),
    "logprobs": ("logps", "log_probs"),
    "token_rewards": ("rewards_per_token",),
}
