"""prime-rl's file monitor (``prime_rl/monitors/file.py``): each step's episodes appended to
``rollouts/step_{n}/{train|eval}/{all|effective}/traces.jsonl``, one line an ``Episode.to_record()`` of
verifiers v1 (``verifiers/v1/episode.py``): the episode's ``env``, ``task``, ``group`` (the rollout group
prime-rl formed), ``run`` (with ``work.step``, the step the episode was dispatched at, and the policy
versions it spanned), ``ok``, ``errors``, and ``traces``, one per agent. A trace (``verifiers/v1/trace.py``)
holds its messages as a graph of ``nodes`` (``parent``, ``message``, ``sampled``, and the tokens each message
adds: ``token_ids``, ``mask`` (true on the sampled tokens), ``logprobs``, ``advantages`` and
``reference_logprobs`` over the sampled tokens, ``loss_weights`` over all its tokens), ``rewards`` (name →
score and weight), ``metrics`` and ``info``; each root-to-leaf path of the graph is one training sample.

Each path of each trace is a response (see ``Dialect.rows``): the prompt is the path's messages before the
first sampled one, the response the rest (the model's sampled turns, and the tool results between them);
the per-token fields are the sampled tokens', joined along the path.

Newer prime-rl (``prime_rl/monitors/file/monitor.py`` ``log_episodes``, ``log_annotations``) appends every
episode once, in arrival order, to a chunked trace stream ``monitors/file/traces/stream/{n:05d}.jsonl``
(sealed into ``{n:05d}.jsonl.zst``, seekable zstd frames, once it passes its size: ``traces/chunks.py``),
with one summary row per episode in ``traces/stream.index.jsonl`` (``traces/index.py`` ``index_row``: its
``trace_ids``, ``chunk`` and ``offset``). What is learnt later about a trace arrives as annotations,
``traces/annotations/{producer}/{n:05d}.jsonl[.zst]`` with ``{producer}.index.jsonl`` (``trace_id``, ``chunk``,
``offset``): ``{"version", "trace_id", "info", "branches": [{"index", "advantages" | "trainer_logprobs" |
"entropies" | "is_masked": [...]}]}`` (``traces/update.py``), each stream full-length over the branch's token
prefix with nulls where unknown; the trainer writes ``trainer_logprobs``, ``entropies`` and ``is_masked`` and
the orchestrator ``advantages`` (``trainer/rl/annotations.py``, ``orchestrator/annotations.py``). A stream
chunk's responses are joined to their traces' annotations (:data:`DIALECT`'s companion): each stream taken
at the branch's sampled positions, the newest update of a field winning, as ``update.py``
``fold_trace_updates`` folds them (a null stays a null here, where the fold drops a partly covered node)."""

from __future__ import annotations

import hashlib
import re

import orjson

from data.schema.chat import RESPONSE_OWN, call_text, messages_text
from data.schema.contract import BadLine
from data.schema.dialects.base import Companion, Dialect, Reading, RunFiles

TRACES, NODES = "traces", "nodes"
# The per-sampled-token lists of a node and the contract's (or the trainer's own) names for them: the
# sampling log-probs are the only policy log-probs the file keeps (the contract's logprobs, so that KL to
# the reference is drawn).
COMPACT = {"logprobs": "logprobs", "reference_logprobs": "ref_logprobs", "advantages": "advantages"}
# The model's own text of a response of several turns, until line() sets it as chat.RESPONSE_OWN (a record's
# own field of that name would be kept apart by validate_record, which looks before line()).
_OWN = "__prime_rl_own"
# The branch a response is of its trace, and its sampled tokens' positions in the branch's token prefix (which
# an annotation's streams run over), until line() joins the annotations.
_BRANCH, _AT = "__prime_rl_branch", "__prime_rl_at"
_FILE = re.compile(r"(^|/)rollouts/step_\d+/(train|eval)/(all|effective)/traces\.jsonl$")
# A chunk of the trace stream, plain or sealed (traces/chunks.py chunk_path: {number:05d}.jsonl[.zst]).
_STREAM = re.compile(r"(^|/)traces/stream/(\d+)\.jsonl(\.zst)?$")
# The annotations' per-token streams (traces/update.py STREAM_FIELDS) and the names they are kept under.
STREAM_FIELDS = ("advantages", "trainer_logprobs", "entropies", "is_masked")


def _text(message: dict) -> str:
    """A message's text as the board shows it: an assistant's reasoning, content and tool calls
    (``[call name(arguments)]``), a blank line apart; any other's content."""
    content = messages_text([{"role": "x", "content": message.get("content")}]) or ""
    if message.get("role") != "assistant":
        return content
    calls = [c for c in message.get("tool_calls") or () if isinstance(c, dict)]
    parts = [
        message.get("reasoning_content"),
        content,
        "\n".join(call_text(c.get("name"), c.get("arguments")) for c in calls),
    ]
    return "\n\n".join(p for p in parts if isinstance(p, str) and p)


def _paths(nodes: list[dict]) -> list[list[int]]:
    """Each root-to-leaf path of a trace's nodes (a leaf: no node's parent), as verifiers' Trace.branches."""
    has_child = {n.get("parent") for n in nodes if isinstance(n.get("parent"), int)}
    paths = []
    for leaf in (i for i in range(len(nodes)) if i not in has_child):
        path, nid, seen = [], leaf, set()
        while isinstance(nid, int) and 0 <= nid < len(nodes) and nid not in seen:
            seen.add(nid)
            path.append(nid)
            nid = nodes[nid].get("parent")
        paths.append(path[::-1])
    return paths


def _tokens(nodes: list[dict]) -> dict:
    """The sampled tokens of a path's nodes and their per-token fields, joined along the path: a node's
    compact lists (over its sampled tokens) as they are, padded with nulls where one is shorter; its
    loss weights (over all its tokens) cut to the sampled ones. A field no node has is left out."""
    ids: list = []
    fields: dict[str, list] = {}
    weights: dict[str, list] = {}
    prefix: list[int] = []  # the sampled tokens' positions in the path's whole token prefix
    offset = 0
    for node in nodes:
        mask, tokens = node.get("mask") or [], node.get("token_ids") or []
        at = [i for i, m in enumerate(mask) if m is True and i < len(tokens)]
        prefix.extend(offset + i for i in at)
        offset += len(tokens) if isinstance(tokens, list) else 0
        for name, target in COMPACT.items():
            values = node.get(name)
            got = (
                fields.setdefault(target, [None] * len(ids))
                if isinstance(values, list)
                else fields.get(target)
            )
            if got is not None:
                vals = values if isinstance(values, list) else []
                got.extend((vals + [None] * len(at))[: len(at)])
        for name, values in (node.get("loss_weights") or {}).items():
            if isinstance(values, list):
                got = weights.setdefault(name, [None] * len(ids))
                got.extend(values[i] if i < len(values) else None for i in at)
        for other in (*fields.values(), *weights.values()):
            other.extend([None] * (len(ids) + len(at) - len(other)))
        ids.extend(tokens[i] for i in at)
    if not ids:
        return {}
    return {"response_tokens": ids, **fields, **({"loss_weights": weights} if weights else {}), _AT: prefix}


def _episode_fields(ep: dict) -> dict:
    """What every response of an episode shares: its step, group, ids, env and task."""
    run = ep.get("run") if isinstance(ep.get("run"), dict) else {}
    work = run.get("work") if isinstance(run.get("work"), dict) else {}
    errors = ep.get("errors") if isinstance(ep.get("errors"), list) else []
    out = {
        "step": work.get("step"),
        "group_id": (ep.get("group") or {}).get("id") if isinstance(ep.get("group"), dict) else None,
        "episode_id": ep.get("id"),
        "env": ep.get("env"),
        "task": ep.get("task"),
        "policy": work.get("policy"),
        "episode_ok": ep.get("ok"),
    }
    out["episode_error"] = _last_error(errors)
    return {k: v for k, v in out.items() if v is not None}


def _last_error(errors) -> str | None:
    """``type: message`` of the last of a list of verifiers' Error records, None for none."""
    if not isinstance(errors, list) or not errors or not isinstance(errors[-1], dict):
        return None
    return f"{errors[-1].get('type')}: {errors[-1].get('message')}"


def _reward(rewards) -> float:
    """The trace's reward as verifiers' Trace.reward computes it (and prime-rl trains on): the sum of score ×
    weight of its recorded rewards, 0 for a trace with none (a failed one: its ``ok`` and ``error`` say so)."""
    given = [
        r for r in (rewards or {}).values() if isinstance(r, dict) and isinstance(r.get("score"), int | float)
    ]
    return sum(float(r["score"]) * float(r.get("weight", 1.0)) for r in given)


def rows(ep: dict) -> list[dict]:
    """An episode record as one record per path of each of its traces."""
    if isinstance(ep, dict) and isinstance(ep.get(NODES), list) and TRACES not in ep:
        ep = {
            "task": ep.get("task"),
            TRACES: [ep],
        }  # one Trace.to_record() a line (verifiers' own traces.jsonl)
    if not isinstance(ep, dict) or not isinstance(ep.get(TRACES), list):
        raise BadLine("not a verifiers episode record (no 'traces' list)")
    if not ep[TRACES]:
        return []  # a failed episode, kept in all/ "including trace-less failures": noted
    shared = _episode_fields(ep)
    out = []
    for trace in ep[TRACES]:
        nodes = trace.get(NODES) if isinstance(trace, dict) else None
        if not isinstance(nodes, list) or not all(isinstance(n, dict) for n in nodes):
            raise BadLine("a trace of the episode has no list of message nodes")
        paths = _paths(nodes) or [[]]
        agent = trace.get("agent") if isinstance(trace.get("agent"), dict) else {}
        rewards = trace.get("rewards") if isinstance(trace.get("rewards"), dict) else {}
        for b, path in enumerate(paths):
            on = [nodes[i] for i in path]
            first = next((k for k, n in enumerate(on) if n.get("sampled") is True), len(on))
            msgs = [n.get("message") if isinstance(n.get("message"), dict) else {} for n in on]
            said = [{"role": m.get("role"), "content": _text(m)} for m in msgs]
            rec = {
                **shared,
                "prompt": said[:first] if first > 1 else (said[0]["content"] if first else ""),
                "response": messages_text(said[first:])
                if len(said) - first > 1
                else (said[-1]["content"] if said[first:] else ""),
                "reward": _reward(rewards),
                "rewards": {name: r.get("score") for name, r in rewards.items() if isinstance(r, dict)},
                "metrics": trace.get("metrics"),
                "info": trace.get("info"),
                "trace_id": trace.get("id"),
                "agent": agent.get("name"),
                "ok": trace.get("ok"),
                "is_completed": trace.get("is_completed"),
                "stop_condition": trace.get("stop_condition"),
                "error": _last_error(trace.get("errors")),
                **_tokens(on),
            }
            if len(said) - first > 1:
                rec[_OWN] = "\n\n".join(
                    s["content"]
                    for s, n in zip(said[first:], on[first:], strict=True)
                    if n.get("sampled") is True
                )
            if len(paths) > 1:
                rec["branch"] = b
            rec[_BRANCH] = b
            out.append({k: v for k, v in rec.items() if v is not None})
    return out


def _annotate(obj: dict, streams: dict[str, list], at: list[int]) -> None:
    """A response's per-token fields from its branch's annotation streams, taken at its sampled positions
    ``at``: the trainer's log-probs become its log-probs (the sampler's its ``inference_logprobs``, so that
    the inference–trainer gap is drawn), entropies, advantages and is_masked (1 / 0) as they are named."""

    def take(values: list) -> list:
        return [values[i] if i < len(values) else None for i in at]

    trainer = take(streams["trainer_logprobs"]) if "trainer_logprobs" in streams else None
    if trainer is not None and any(v is not None for v in trainer):
        if isinstance(obj.get("logprobs"), list):
            obj["inference_logprobs"] = obj["logprobs"]
        obj["logprobs"] = trainer
    for name in ("entropies", "advantages"):
        if name in streams:
            obj[name] = take(streams[name])
    if "is_masked" in streams:
        obj["is_masked"] = [None if v is None else float(bool(v)) for v in take(streams["is_masked"])]


def line(obj: dict, reading: Reading) -> dict:
    """One path of a trace (see :func:`rows`): joined to its trace's annotations where the file has them,
    its token ids named by a local tokenizer.json, if given."""
    branch, at = obj.pop(_BRANCH, 0), obj.pop(_AT, [])
    got = reading.joined.take(obj.get("trace_id")) if reading.joined is not None else None
    if got is not None and branch in got:
        _annotate(obj, got[branch], at)
    if isinstance(obj.get("response_tokens"), list):
        obj["response_tokens"] = reading.token_names(obj["response_tokens"])
    if _OWN in obj:
        obj[RESPONSE_OWN] = obj.pop(_OWN)
    return obj


def recognise(rel: str, fields: frozenset[str]) -> int:
    if not ({TRACES, "task"} <= fields or {NODES, "task", "agent"} <= fields):
        return 0
    return 40 + 5 * bool(_FILE.search(rel) or _STREAM.search(rel))


# ---- the trace stream's annotations (the stream chunk's companion) ----------------------------------------


def annotations_path(rel: str) -> str | None:
    """The annotations folder beside a trace stream's chunk (``…/traces/stream/00000.jsonl`` →
    ``…/traces/annotations``); None for any other file."""
    m = _STREAM.search(rel)
    return None if m is None else f"{rel[: m.start() + len(m.group(1))]}traces/annotations"


def _json_lines(raw: bytes | None) -> list[dict]:
    """The JSON objects of a JSON-lines file's complete lines (a torn or damaged line skipped)."""
    out = []
    for ln in (raw or b"").splitlines():
        try:
            obj = orjson.loads(ln)
        except orjson.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def _traces_of(files: RunFiles, rel: str) -> set | None:
    """The trace ids of the episodes a stream chunk holds, from ``stream.index.jsonl`` (``chunk``,
    ``trace_ids``); None without an index (then every annotation is a candidate)."""
    m = _STREAM.search(rel)
    traces = rel[: m.start() + len(m.group(1))] + "traces"
    rows = _json_lines(files.read(f"{traces}/stream.index.jsonl"))
    if not rows:
        return None
    chunk = int(m.group(2))
    return {
        t for r in rows if r.get("chunk") == chunk for t in (r.get("trace_ids") or ()) if isinstance(t, str)
    }


def _producers(files: RunFiles, folder: str) -> list[str]:
    """The annotations' producers, by their index files (``{producer}.index.jsonl``), sorted."""
    suffix = ".index.jsonl"
    return [f[len(folder) + 1 : -len(suffix)] for f in files.listdir(folder) if f.endswith(suffix)]


def annotations_stamp(files: RunFiles, rel: str) -> list:
    """The sizes of the stream's index and of the producers' annotation indexes: what
    :func:`annotations_signature` is computed from (appended to, never rewritten)."""
    m = _STREAM.search(rel)
    traces = rel[: m.start() + len(m.group(1))] + "traces"
    folder = f"{traces}/annotations"
    names = [f"{traces}/stream.index.jsonl"] + [
        f"{folder}/{p}.index.jsonl" for p in _producers(files, folder)
    ]
    return [[name, files.size(name)] for name in names]


def annotations_signature(files: RunFiles, rel: str) -> list:
    """What tells a stream chunk's annotations changed: how many updates the producers' indexes list for its
    traces and a digest of where they are (every update when the stream has no index)."""
    folder, wanted = annotations_path(rel), _traces_of(files, rel)
    where = []
    for producer in _producers(files, folder):
        for r in _json_lines(files.read(f"{folder}/{producer}.index.jsonl")):
            if wanted is None or r.get("trace_id") in wanted:
                where.append([producer, r.get("trace_id"), r.get("chunk"), r.get("offset")])
    return [len(where), hashlib.sha1(orjson.dumps(where)).hexdigest()[:16]]


def annotations_rows(files: RunFiles, rel: str) -> dict:
    """The annotations of a stream chunk's traces: trace id -> branch index -> field -> its stream (the
    newest update of a field winning: producers in name order, each one's chunks and lines in write order)."""
    folder, wanted = annotations_path(rel), _traces_of(files, rel)
    out: dict = {}
    for producer in _producers(files, folder):
        chunks = [f for f in files.listdir(f"{folder}/{producer}") if re.search(r"/\d+\.jsonl(\.zst)?$", f)]
        for chunk in sorted(chunks, key=lambda f: int(f.rsplit("/", 1)[1].split(".", 1)[0])):
            for update in _json_lines(files.read(chunk)):
                trace = update.get("trace_id")
                if not isinstance(trace, str) or (wanted is not None and trace not in wanted):
                    continue
                for branch in update.get("branches") or ():
                    if not isinstance(branch, dict) or not isinstance(branch.get("index"), int):
                        continue
                    streams = out.setdefault(trace, {}).setdefault(branch["index"], {})
                    streams.update({f: branch[f] for f in STREAM_FIELDS if isinstance(branch.get(f), list)})
    return out


def auxiliary(rel: str, names=()) -> str | None:
    """Why the file at ``rel`` (its path inside the run) is one of prime-rl's file monitor's side files and
    not rollouts, or None."""
    if re.search(r"(^|/)traces/stream\.index\.jsonl$", rel):
        return "prime-rl's trace index (one summary row per episode, where the stream holds it)"
    if re.search(r"(^|/)traces/annotations/", rel):
        return "prime-rl's trace annotations: per-token streams joined to the trace stream's responses"
    if re.search(r"(^|/)traces/live/", rel):
        return "prime-rl's in-flight traces (read once they land in the trace stream)"
    if re.search(r"(^|/)monitors/file/metrics\.jsonl$", rel):
        return "prime-rl's metrics rows (scalars per step, not rollouts)"
    return None


DIALECT = Dialect(
    name="prime_rl",
    title="prime-rl file monitor (traces/stream/{n}.jsonl[.zst] with annotations, or rollouts/step_{n}/…/traces.jsonl)",
    description="one line a verifiers episode: its traces' message graphs with tokens, rewards; a response "
    "per path of each trace",
    recognise=recognise,
    mapping=(
        "each episode's traces, each root-to-leaf path of a trace's message nodes a response",
        "prompt = the path's messages before its first sampled one; response = the rest (the model's sampled "
        "turns with reasoning and tool calls, the tool results between them; length and repetition count "
        "the sampled turns)",
        "rewards → reward = Σ score × weight (verifiers' Trace.reward: 0 for a failed trace with none, its ok "
        "and error columns say so); each reward's score a column",
        "run.work.step → step (else the folder's step_{n}; a stream chunk's number is no step); group.id → "
        "group_id; eval/ → the run's validation",
        "nodes' sampled tokens (mask true) → the response's tokens (their ids, or their text with a "
        "tokenizer.json); logprobs (the sampler's), reference_logprobs, advantages, loss_weights per token",
        "metrics, info, task, env, policy versions: columns",
        "traces/stream/{n}.jsonl[.zst] read as the stream's chunks; traces/annotations joined by trace id: "
        "trainer_logprobs → logprobs (the sampler's → inference_logprobs), entropies, advantages, is_masked per token",
    ),
    line=line,
    stepless=False,
    rows=rows,
    own_steps=lambda rel: _STREAM.search(rel) is not None,
    companion=Companion(
        path=annotations_path,
        key="trace_id",
        what="prime-rl's traces/annotations by trace id; a response with none is one the trainer has not "
        "trained on yet (or never will: evaluation, filtered)",
        gather=annotations_rows,
        signature=annotations_signature,
        stamp=annotations_stamp,
    ),
)
