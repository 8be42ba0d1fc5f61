"""OpenRLHF: its experiences hold action_log_probs and base_action_log_probs."""

ALIASES: dict[str, tuple[str, ...]] = {
    "ref_logprobs": ("base_action_log_probs",),
    "logprobs": ("action_log_probs",),
}
