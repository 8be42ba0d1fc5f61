"""OpenRLHF-style dumps: OpenRLHF itself writes no rollout file (only a W&B table); a loop that dumps its
experiences by hand names the log-probs action_log_probs and base_action_log_probs (``data/writer.py``
writes this project's contract instead)."""

from __future__ import annotations

from data.schema.dialects.base import Dialect, merge_aliases
from data.schema.dialects.contract import ALIASES as CONTRACT_ALIASES
from data.schema.dialects.contract import frame as contract_frame
from data.schema.dialects.contract import line as contract_line

OWN_ALIASES: dict[str, tuple[str, ...]] = {
    "ref_logprobs": ("base_action_log_probs",),
    "logprobs": ("action_log_probs",),
}
ALIASES = merge_aliases(CONTRACT_ALIASES, OWN_ALIASES)


def recognise(rel: str, fields: frozenset[str]) -> int:
    return 15 if fields & {"action_log_probs", "base_action_log_probs"} else 0


DIALECT = Dialect(
    name="openrlhf",
    title="OpenRLHF-style experience dump",
    description="a hand-written dump of OpenRLHF experiences: the contract's fields with action_log_probs",
    recognise=recognise,
    aliases=ALIASES,
    mapping=("action_log_probs, base_action_log_probs → logprobs, ref_logprobs",),
    line=contract_line,
    frame=contract_frame,
)
