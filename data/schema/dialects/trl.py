"""TRL: the arguments its trainers hand a reward function (prompts, completions, rewards, training_step),
logged as they are. (Its ``log_completions`` Parquet files write prompt and completion.)"""

ALIASES: dict[str, tuple[str, ...]] = {
    "prompt": ("prompts",),
    "response": ("completions",),
    "step": ("training_step",),
    "reward": ("rewards",),
}
