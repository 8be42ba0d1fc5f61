"""The rollout data contract, and the trainers' dialects read onto it.

``contract``: the known fields, their canonical types, the store's own column names; ``record``: one
parsed line checked and converted (line-by-line path); ``frame``: a chunk Polars parsed at once checked
and conformed (fast path); ``chat``: chat messages and chat-template strings as text; ``dialects/``: one
module per trainer's format; ``secrets``: the fields whose texts are masked. This package's face is what ingest applies to its lines.
"""

from data.schema.chat import PROMPT_LEAD, RESPONSE_OWN, template_lead
from data.schema.contract import CANONICAL, IN_LINE, TOKEN_FIELDS, BadLine, trainer_token_fields
from data.schema.dialects import (
    CONTRACT,
    MAPPED,
    TRAIN,
    VALIDATION,
    Companion,
    Dialect,
    Match,
    Reading,
    RunFiles,
    by_name,
    detect,
    dialects_by_name,
    split_of,
    step_from_name,
    step_from_path,
)
from data.schema.frame import conform_frame, frame_is_conformant, records_frame
from data.schema.record import validate_record
from data.schema.secrets import is_secret, mask_text

__all__ = [
    "CANONICAL",
    "MAPPED",
    "CONTRACT",
    "IN_LINE",
    "PROMPT_LEAD",
    "RESPONSE_OWN",
    "TOKEN_FIELDS",
    "TRAIN",
    "VALIDATION",
    "BadLine",
    "Dialect",
    "Match",
    "Companion",
    "Reading",
    "RunFiles",
    "by_name",
    "conform_frame",
    "detect",
    "dialects_by_name",
    "frame_is_conformant",
    "is_secret",
    "mask_text",
    "records_frame",
    "split_of",
    "step_from_name",
    "step_from_path",
    "template_lead",
    "trainer_token_fields",
    "validate_record",
]
