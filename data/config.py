"""Settings of the app: the only module that reads the environment.

Command-line flags win over environment variables, which win over the defaults below.
"""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

from data.metrics.families import INFER_GAP_TAIL as _INFER_GAP_TAIL
from data.metrics.families import INFER_GAP_TAIL_TEXT as _INFER_GAP_TAIL_TEXT
from data.remote import RemotePath, is_url, location

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_ROOT = REPO_ROOT / "rollout_samples"
DEFAULT_PAD_TOKENS = ("<pad>", "<PAD>", "[PAD]", "<|pad|>", "<|endoftext|>")
# Tokens a model ends its response with (GPT-2 / Qwen base, Llama 2 / Mistral, ChatML / Qwen chat, Llama 3,
# Gemma, Phi-3, gpt-oss): a response without one was cut at the length limit (see
# data/metrics/degeneration.py, ends_with_end_token).
DEFAULT_END_TOKENS = (
    "<|endoftext|>",
    "</s>",
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end_of_text|>",
    "<eos>",
    "<end_of_turn>",
    "<|end|>",
    "<|return|>",
)


# Polars' allocator (jemalloc) gives freed memory back to the system after 0.5 s by default. Ingest frees
# and allocates ~100 MB a chunk, about once a second per worker, so every chunk faulted its pages in again.
# Kept for 5 s instead: on a 500 MB run, page faults 480k -> 245k and system CPU time 2.3 -> 1.3 s (of
# ~19 CPU-s); peak RSS of a 2 GB ingest +30 MB. Polars reads this variable when it is first imported.
POLARS_ALLOCATOR = ("_RJEM_MALLOC_CONF", "dirty_decay_ms:5000,muzzy_decay_ms:5000")


def configure_allocator(environ=None) -> None:
    """Set :data:`POLARS_ALLOCATOR` unless the user set that variable. Called by ``data/__init__.py``,
    before any module of the package imports Polars (later it would have no effect)."""
    environ = os.environ if environ is None else environ
    name, value = POLARS_ALLOCATOR
    environ.setdefault(name, value)


# Polars runs a regex search with Rust's regex crate: matching is linear in the text, but its cost per byte
# grows with the compiled pattern, which the crate caps at ~10 MiB by default: ((a{50}){50}){50} (4.2 MiB
# compiled) took minutes over 1 MB texts. Capped at 1 MiB: \w{20} (~1 MiB) and (?s).{1000} still pass, a
# costlier pattern is refused at once with a message. Polars reads the variable when a thread first compiles
# a regex, so it is set before any query runs (and passed on to the search helpers, see data/bounded.py).
REGEX_SIZE_LIMIT = ("POLARS_REGEX_SIZE_LIMIT", 1 << 20)
# Seconds a text search may take before it is stopped (RLBOARD_SEARCH_SECONDS).
DEFAULT_SEARCH_SECONDS = 10.0
# Seconds an export may stream before it is cut off with a last line saying so (RLBOARD_EXPORT_SECONDS):
# gunicorn's timeout does not stop a request served by a thread. A run of 2.56M responses exports in ~1 min.
DEFAULT_EXPORT_SECONDS = 600.0
# A run's annotations file stops taking writes past this size (~100k annotations of 300 bytes), and a user
# may write this many a minute: the only write path of the board stays bounded in disk and in rate.
DEFAULT_ANNOTATION_FILE_BYTES = 32 << 20
DEFAULT_ANNOTATION_RATE = 60


# The tail of the inference–trainer gap, |Δ| > INFER_GAP_TAIL (ln 2), is defined beside its columns in
# data/metrics/registry.py (data.metrics may not import this module: it reaches data.store, which reads the
# registry) and named here with the other settings; pages read it from here.
INFER_GAP_TAIL, INFER_GAP_TAIL_TEXT = _INFER_GAP_TAIL, _INFER_GAP_TAIL_TEXT
# Positions (Δ_t) a correction preview counts from the token arrays for its token shares (data/infer_gap.py):
# the steps nearest the selected one whose positions fit, the others not drawn (said in the panel).
GAP_PREVIEW_TOKENS = 4_000_000


def configure_regex_limit(environ=None) -> None:
    """Set :data:`REGEX_SIZE_LIMIT` (always: a limit inherited from elsewhere must not lift the board's)."""
    environ = os.environ if environ is None else environ
    name, value = REGEX_SIZE_LIMIT
    environ[name] = str(value)


def _default_cache_dir() -> Path:
    return Path(tempfile.gettempdir()) / "rlboard-cache"


def _default_work_dir() -> Path:
    return Path(tempfile.gettempdir()) / "rlboard-work"


@dataclass(frozen=True)
class Settings:
    """Resolved settings; build one with :func:`load_settings`."""

    # A local folder, or an object store's URL (``s3://bucket/prefix``: a RemotePath, see data/remote.py).
    root: Path | RemotePath = DEFAULT_ROOT
    # The local folder of the stores: the cache itself, or with ``store_url`` the working copies of the
    # stores kept there (a folder of ``RLBOARD_WORK_DIR`` named after the URL, see data/store/shared.py).
    cache_dir: Path = field(default_factory=_default_cache_dir)
    # ``--cache-dir s3://bucket/prefix``: the stores on object storage, shared by replicas (None: local only).
    store_url: str | None = None
    host: str = "127.0.0.1"
    port: int = 8050
    pad_tokens: tuple[str, ...] = DEFAULT_PAD_TOKENS
    end_tokens: tuple[str, ...] = DEFAULT_END_TOKENS
    # Seconds between two checks of a run's files for new lines (live runs).
    refresh_seconds: float = 5.0
    # Optional shared-server protection: "user:password" for HTTP basic auth, or a bearer token.
    basic_auth: str | None = None
    token: str | None = None
    # A token that lets pages in but never writes (annotations): RLBOARD_READ_TOKEN.
    read_token: str | None = None
    # Served under a sub-path behind a reverse proxy, e.g. "/rlboard/".
    url_prefix: str = "/"
    demo: bool = True
    # Seconds a text search (a regular expression over prompts and responses) may take before it is stopped.
    search_seconds: float = DEFAULT_SEARCH_SECONDS
    # The dialect of files whose dialect the board cannot tell for sure (see data/schema/dialects; a run's
    # rlboard.toml names its own), and the weights of reward functions logged a column each (TRL's).
    dialect: str | None = None
    reward_weights: tuple[tuple[str, float], ...] | None = None
    # A local tokenizer.json (Hugging Face tokenizers) that names the token ids of files that log ids
    # (NeMo-RL's token_ids); nothing is downloaded.
    tokenizer: Path | None = None
    # Seconds an export may stream before it is cut off (its last line says so).
    export_seconds: float = DEFAULT_EXPORT_SECONDS
    # The object store's settings (``aws_access_key_id``, ``aws_endpoint``…) from the usual variables (see
    # :func:`storage_options`), as pairs.
    storage: tuple[tuple[str, str], ...] = ()
    # Annotations (data/annotations.py): a run's file may grow to this many bytes, and one user may write
    # this many annotations a minute (RLBOARD_ANNOTATION_FILE_BYTES, RLBOARD_ANNOTATION_RATE).
    annotation_file_bytes: int = DEFAULT_ANNOTATION_FILE_BYTES
    annotation_rate: int = DEFAULT_ANNOTATION_RATE

    @property
    def shared(self):
        """The stores on object storage (a :class:`data.store.shared.SharedStores`), or None."""
        if self.store_url is None:
            return None
        from data.store.shared import SharedStores

        return SharedStores(self.store_url, self.storage)

    def with_overrides(self, **kw) -> Settings:
        return replace(self, **{k: v for k, v in kw.items() if v is not None})


def _env(name: str, environ) -> str | None:
    value = environ.get(name)
    return value if value not in (None, "") else None


def parse_pad_tokens(text: str) -> tuple[str, ...]:
    """Parse a comma-separated pad token list (``"<pad>,<|endoftext|>"``); blanks are dropped."""
    return tuple(t.strip() for t in text.split(",") if t.strip())


@dataclass(frozen=True)
class ReadLimits:
    """How much one rollout file may make the board read (issue 33): a file past a limit is read up to it,
    and the rest refused with a reason that names the limit's setting. Each is a setting
    (``RLBOARD_MAX_LINE_BYTES`` …); a real line is a few MB (32k tokens with four per-token arrays: ~3 MB)."""

    line_bytes: int = 64 << 20  # one line (JSON lines, plain or compressed)
    inflated_bytes: int = 16 << 30  # what one compressed file inflates to ...
    inflate_ratio: float = 200.0  # ... and to how many times its own size (beyond the first FLOOR bytes)
    parquet_bytes: int = 2 << 30  # a Parquet file's decoded size (its footer's row groups), read whole
    # Scalar points read from one folder of TensorBoard event files (~24 bytes each, held while the trainer
    # card shows them: 2M points ~50 MB; a long run logs 100k steps x 20 tags)
    tensorboard_points: int = 2_000_000

    NAMES = {
        "line_bytes": "RLBOARD_MAX_LINE_BYTES",
        "inflated_bytes": "RLBOARD_MAX_INFLATED_BYTES",
        "inflate_ratio": "RLBOARD_MAX_INFLATE_RATIO",
        "parquet_bytes": "RLBOARD_MAX_PARQUET_BYTES",
        "tensorboard_points": "RLBOARD_MAX_TENSORBOARD_POINTS",
    }
    FLOOR = 64 << 20  # a small compressed file may always inflate this far, whatever its ratio

    def inflate_cap(self, compressed: int) -> int:
        """The bytes a compressed file of ``compressed`` bytes may inflate to."""
        return int(min(self.inflated_bytes, max(self.FLOOR, self.inflate_ratio * compressed)))


def read_limits(environ=None) -> ReadLimits:
    """The :class:`ReadLimits` of the environment (defaults where unset); a value that is not a positive
    number raises :class:`SettingsError` naming it."""
    environ = os.environ if environ is None else environ
    values = {}
    for key, name in ReadLimits.NAMES.items():
        if (v := _env(name, environ)) is None:
            continue
        try:
            x = float(v)
        except ValueError:
            x = float("nan")
        if not (math.isfinite(x) and x > 0):
            raise SettingsError(f"{name}={v!r} must be a positive number")
        values[key] = x if key == "inflate_ratio" else int(x)
    return ReadLimits(**values)


# A reward function's weight beyond this is a typo or an attack, not a weight: with rewards of order 1 it
# would overflow float64 sums long before it meant anything (rlboard.toml's weights are held to it too).
MAX_REWARD_WEIGHT = 1e6


def parse_reward_weights(text: str, name: str = "RLBOARD_REWARD_WEIGHTS") -> tuple[tuple[str, float], ...]:
    """``"sentiment=1,concise_format=0.5"`` as ``(("sentiment", 1.0), ("concise_format", 0.5))``."""
    out = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        key, sep, value = item.rpartition("=")
        try:
            weight = float(value)
        except ValueError:
            weight = None
        if not sep or not key.strip() or weight is None:
            raise SettingsError(f"{name}={text!r}: {item!r} is not name=weight")
        if not math.isfinite(weight) or abs(weight) > MAX_REWARD_WEIGHT:
            raise SettingsError(
                f"{name}={text!r}: the weight of {key.strip()!r} is {value.strip()}, not a finite number "
                f"within ±{MAX_REWARD_WEIGHT:g}"
            )
        out.append((key.strip(), weight))
    return tuple(out)


class SettingsError(ValueError):
    """A setting that cannot be used; the message names it (the command line prints it as one line)."""


def parse_port(text: str, name: str) -> int:
    """A TCP port (1-65535) from the text of setting ``name``; :class:`SettingsError` otherwise."""
    try:
        port = int(text)
    except ValueError:
        raise SettingsError(f"{name}={text!r} is not a port number") from None
    if not 1 <= port <= 65535:
        raise SettingsError(f"{name}={port} is out of range (1-65535)")
    return port


def normalize_prefix(prefix: str) -> str:
    prefix = "/" + prefix.strip("/")
    return prefix if prefix == "/" else prefix + "/"


# The usual variables of S3 and S3-compatible servers (MinIO, Ceph…), as obstore's option names. Other
# schemes (gs://, az://) take their credentials from their own usual variables, which obstore reads.
STORAGE_VARIABLES = {
    "AWS_ACCESS_KEY_ID": "aws_access_key_id",
    "AWS_SECRET_ACCESS_KEY": "aws_secret_access_key",
    "AWS_SESSION_TOKEN": "aws_session_token",
    "AWS_DEFAULT_REGION": "aws_region",
    "AWS_REGION": "aws_region",  # wins over AWS_DEFAULT_REGION, as in the AWS tools
    "AWS_ENDPOINT_URL": "aws_endpoint",
}


def storage_options(environ=None) -> dict[str, str]:
    """The object store's settings from the environment (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
    ``AWS_SESSION_TOKEN``, ``AWS_REGION``, ``AWS_ENDPOINT_URL``), as obstore names them."""
    environ = os.environ if environ is None else environ
    out = {}
    for var, key in STORAGE_VARIABLES.items():
        if (v := _env(var, environ)) is not None:
            out[key] = v
    return out


def _location(text, storage: dict[str, str], name: str):
    """A root from a flag or variable: a local folder, or an object store's URL."""
    try:
        return location(text, storage)
    except OSError as e:
        raise SettingsError(f"{name}={text!r}: {e.strerror or e}") from None


def location_of(text, settings: Settings):
    """A folder named on the command line, local or on the object store of ``settings`` (its AWS_*
    variables): a :class:`Path` or a :class:`RemotePath`."""
    return _location(text, dict(settings.storage), "PATH")


def _cache(text, storage: dict[str, str], name: str) -> tuple[Path | None, str | None]:
    """``(local folder, None)`` of a local cache folder, ``(None, URL)`` of one on an object store (checked:
    a URL obstore cannot open is said here)."""
    if not is_url(str(text)):
        return Path(text), None
    _location(text, storage, name)
    return None, str(text).rstrip("/")


def work_dir_for(url: str, storage: dict[str, str], base: Path) -> Path:
    """The local working copies of the stores under ``url``: a folder of ``base`` named after the URL and
    its endpoint (two buckets, or one name on two servers, never share a copy)."""
    import hashlib

    key = f"{url}\n{storage.get('aws_endpoint', '')}"
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in url.split("://", 1)[-1])[:40]
    return base / f"{safe}-{hashlib.blake2b(key.encode(), digest_size=6).hexdigest()}"


def load_settings(environ=None, **overrides) -> Settings:
    """Settings from ``RLBOARD_*`` environment variables, then ``overrides`` (flags) on top."""
    environ = os.environ if environ is None else environ
    storage = storage_options(environ)
    s = Settings(storage=tuple(sorted(storage.items())))
    env_values: dict = {}
    if (v := _env("RLBOARD_ROOT", environ)) is not None:
        env_values["root"] = _location(v, storage, "RLBOARD_ROOT")
    caches = {}  # (local folder, URL) of RLBOARD_CACHE_DIR, then of --cache-dir
    if (v := _env("RLBOARD_CACHE_DIR", environ)) is not None:
        caches["env"] = _cache(v, storage, "RLBOARD_CACHE_DIR")
    if (v := _env("RLBOARD_HOST", environ)) is not None:
        env_values["host"] = v
    if (v := _env("RLBOARD_PORT", environ)) is not None:
        env_values["port"] = parse_port(v, "RLBOARD_PORT")
    if (v := _env("RLBOARD_PAD_TOKENS", environ)) is not None:
        env_values["pad_tokens"] = parse_pad_tokens(v)
    if (v := _env("RLBOARD_END_TOKENS", environ)) is not None:
        env_values["end_tokens"] = parse_pad_tokens(v)
    if (v := _env("RLBOARD_REFRESH_SECONDS", environ)) is not None:
        try:
            env_values["refresh_seconds"] = float(v)
        except ValueError:
            raise SettingsError(f"RLBOARD_REFRESH_SECONDS={v!r} is not a number of seconds") from None
    if (v := _env("RLBOARD_BASIC_AUTH", environ)) is not None:
        env_values["basic_auth"] = v
    if (v := _env("RLBOARD_TOKEN", environ)) is not None:
        env_values["token"] = v
    if (v := _env("RLBOARD_READ_TOKEN", environ)) is not None:
        env_values["read_token"] = v
    for key, name in (("annotation_file_bytes", "RLBOARD_ANNOTATION_FILE_BYTES"), ("annotation_rate", "RLBOARD_ANNOTATION_RATE")):  # fmt: skip
        if (v := _env(name, environ)) is not None:
            if not v.isdigit() or int(v) < 1:
                raise SettingsError(f"{name}={v!r} must be a positive whole number")
            env_values[key] = int(v)
    if (v := _env("RLBOARD_URL_PREFIX", environ)) is not None:
        env_values["url_prefix"] = normalize_prefix(v)
    if (v := _env("RLBOARD_DEMO", environ)) is not None:
        env_values["demo"] = v.lower() not in ("0", "false", "no", "off")
    if (v := _env("RLBOARD_SEARCH_SECONDS", environ)) is not None:
        env_values["search_seconds"] = float(v)
    if (v := _env("RLBOARD_DIALECT", environ)) is not None:
        env_values["dialect"] = v.strip()
    if (v := _env("RLBOARD_REWARD_WEIGHTS", environ)) is not None:
        env_values["reward_weights"] = parse_reward_weights(v)
    if (v := _env("RLBOARD_TOKENIZER", environ)) is not None:
        env_values["tokenizer"] = Path(v)
    if (v := _env("RLBOARD_EXPORT_SECONDS", environ)) is not None:
        try:
            env_values["export_seconds"] = float(v)
        except ValueError:
            raise SettingsError(f"RLBOARD_EXPORT_SECONDS={v!r} is not a number of seconds") from None
        if not env_values["export_seconds"] > 0:
            raise SettingsError(f"RLBOARD_EXPORT_SECONDS={v!r} must be more than 0")
    read_limits(environ)  # a bad RLBOARD_MAX_* stops the server at start, not a file's read later
    s = s.with_overrides(**env_values)
    for key in ("pad_tokens", "end_tokens"):
        if key in overrides and isinstance(overrides[key], str):
            overrides[key] = parse_pad_tokens(overrides[key])
    if overrides.get("url_prefix"):
        overrides["url_prefix"] = normalize_prefix(overrides["url_prefix"])
    if overrides.get("root") is not None:
        overrides["root"] = _location(overrides["root"], storage, "--root")
    if overrides.get("cache_dir") is not None:
        caches["flag"] = _cache(overrides.pop("cache_dir"), storage, "--cache-dir")
    local, url = caches.get("flag") or caches.get("env") or (None, None)
    if url is not None:
        work = _env("RLBOARD_WORK_DIR", environ)
        local = work_dir_for(url, storage, Path(work) if work else _default_work_dir())
    overrides.update(cache_dir=local, store_url=url)
    return s.with_overrides(**overrides)
