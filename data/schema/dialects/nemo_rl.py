"""NeMo-RL: ``train_data_step{N}.jsonl`` (and ``val_data_step{N}.jsonl`` for validation) in its log folder,
written by ``Logger.log_batched_dict_as_jsonl``: each line a batch of one (every value in a one-item list,
beside ``idx``).

A training line's ``content`` is the contents of the conversation's messages, without their roles. NeMo-RL's
rollout loop (``run_multi_turn_rollout``) appends the environment's observation after every generation,
so the message log is the prompt (a user message, after a system message when there is one), then the
model's turn and the environment's, alternating, and always ends with the environment (often empty, a tool
result, or "Environment: correct"). Its full-sequence arrays (``token_ids``, ``generation_logprobs`` from
the inference engine, ``prev_logprobs`` from the trainer, ``advantages``, ``token_loss_mask``, over prompt
and response, padded, with ``input_lengths``) are cut to the generated tokens (mask 1). A validation line's
``content`` is the message log itself, roles included."""

from __future__ import annotations

import re

from data.schema.dialects.base import Dialect, Reading, base_name, merge_aliases
from data.schema.dialects.contract import ALIASES as CONTRACT_ALIASES

ALIASES = merge_aliases(CONTRACT_ALIASES, {"reward": ("rewards",)})
CONTENTS = "content"
BATCH_INDEX = "idx"
MASK, LENGTH = "token_loss_mask", "input_lengths"
# A sample left out of the loss (0) or kept (1): NeMo-RL's loss masks each token by token_loss_mask *
# sample_loss_mask (nemo_rl/algorithms/loss_functions.py, ClippedPGLossFn: mask = token_mask *
# sample_mask.unsqueeze(-1)), so the generated tokens keep that product as their token_loss_mask.
SAMPLE_MASK = "sample_loss_mask"
# The full-sequence arrays and what each becomes once cut to the generated tokens: the trainer's log-probs
# are the policy's (the contract's logprobs); the inference engine's and the advantages are the trainer's
# own per-token fields.
ARRAYS = {
    "token_ids": "response_tokens",
    "prev_logprobs": "logprobs",
    "generation_logprobs": "generation_logprobs",
    "advantages": "advantages",
}
ENVIRONMENT = "environment"


def unwrap_batch_of_one(obj):
    """A parsed line logged as a batch of one (at least two values, every one but :data:`BATCH_INDEX` a
    list of one item) with each value taken out of its list; any other line as it is."""
    if not isinstance(obj, dict):
        return obj
    values = [v for k, v in obj.items() if k != BATCH_INDEX]
    if len(values) < 2 or not all(isinstance(v, list) and len(v) == 1 for v in values):
        return obj
    return {k: v if k == BATCH_INDEX else v[0] for k, v in obj.items()}


def message_log(contents: list) -> list[dict] | None:
    """The message log of a training line's contents (strings without roles): the prompt's messages (one,
    or two when their count is even: a system message and the user's), then the model's turn and the
    environment's, alternating. A log of two is a prompt and the model's turn (no observation logged).
    None for anything but a list of at least two strings."""
    if not isinstance(contents, list) or len(contents) < 2 or not all(isinstance(c, str) for c in contents):
        return None
    n = len(contents)
    lead = 1 if n == 2 or n % 2 else 2
    roles = ["system", "user"][-lead:] + [("assistant", ENVIRONMENT)[k % 2] for k in range(n - lead)]
    return [{"role": r, "content": c} for r, c in zip(roles, contents, strict=True)]


def _generated(mask, length) -> list[int] | None:
    """The positions of the generated tokens: mask 1 within the sequence's length."""
    if not isinstance(mask, list):
        return None
    n = length if isinstance(length, int) and not isinstance(length, bool) else len(mask)
    return [i for i, m in enumerate(mask[:n]) if m == 1]


def line(obj: dict, reading=None) -> dict:
    obj = unwrap_batch_of_one(obj)
    contents = obj.get(CONTENTS)
    log = message_log(contents)
    if log is None and isinstance(contents, list) and contents and all(isinstance(m, dict) for m in contents):
        log = contents  # a validation line: the messages with their roles
    if log is not None and "prompt" not in obj and "response" not in obj:
        first = next((i for i, m in enumerate(log) if m.get("role") == "assistant"), None)
        if first:
            del obj[CONTENTS]
            obj["prompt"], obj["response"] = log[:first], log[first:]
    keep = _generated(obj.get(MASK), obj.get(LENGTH))
    if keep is not None:
        for name, target in ARRAYS.items():
            values = obj.pop(name, None)
            if isinstance(values, list) and target not in obj:
                cut = [values[i] for i in keep if i < len(values)]
                if target == "response_tokens":  # ids, named by a local tokenizer.json when one is given
                    cut = (reading or Reading()).token_names(cut)
                obj[target] = cut
        obj.pop(MASK)
        sample = obj.get(SAMPLE_MASK)
        if isinstance(sample, int | float) and not isinstance(sample, bool):
            obj[MASK] = [sample] * len(keep)  # the loss mask of the generated tokens (mask 1 each)
    return DIALECT.apply_aliases(obj)


_FILE = re.compile(r"^(train|val)_data_step\d+$")


def recognise(rel: str, fields: frozenset[str]) -> int:
    named = bool(_FILE.match(base_name(rel.rsplit("/", 1)[-1])))
    if {CONTENTS, BATCH_INDEX} <= fields or (named and CONTENTS in fields):
        return 25 + 5 * named
    return 5 * named  # the name alone: less sure than a contract's fields


DIALECT = Dialect(
    name="nemo_rl",
    title="NeMo-RL train_data_step{N}.jsonl",
    description="a batch of one a line: content (prompt, then the model's and the environment's turns), "
    "rewards, full-sequence token arrays",
    recognise=recognise,
    aliases=ALIASES,
    mapping=(
        "content → prompt (the messages before the model's first turn) and response (the model's turns, with "
        "the environment's observations between them; length and repetition count the model's turns)",
        "rewards → reward",
        "token_ids, prev_logprobs, generation_logprobs, advantages → cut to the generated tokens "
        "(token_loss_mask 1 within input_lengths): tokens (their ids, or their text with a tokenizer.json), "
        "logprobs (the trainer's), generation_logprobs (the inference engine's), advantages",
        "sample_loss_mask → the generated tokens' token_loss_mask (the loss's mask: token mask × sample mask)",
        "val_data_step{N}.jsonl → the run's validation",
    ),
    line=line,
)
