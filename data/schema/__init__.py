"""The rollout data contract, and the trainers' dialects read onto it.

``contract``: the known fields, their canonical types, the store's own column names; ``record``: one
parsed line checked and converted (line-by-line path); ``frame``: a chunk Polars parsed at once checked
and conformed (fast path); ``chat``: chat messages as text; ``dialects/``: one module per trainer's
format. This package's face is what ingest applies to its lines.
"""

from data.schema.chat import PROMPT_LEAD
from data.schema.contract import CANONICAL, TOKEN_FIELDS, BadLine, trainer_token_fields
from data.schema.dialects import step_from_name, unwrap_batch_of_one_frame
from data.schema.frame import conform_frame, frame_is_conformant, records_frame
from data.schema.record import validate_record

__all__ = [
    "CANONICAL",
    "PROMPT_LEAD",
    "TOKEN_FIELDS",
    "BadLine",
    "conform_frame",
    "frame_is_conformant",
    "records_frame",
    "step_from_name",
    "trainer_token_fields",
    "unwrap_batch_of_one_frame",
    "validate_record",
]
