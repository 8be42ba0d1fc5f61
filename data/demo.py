"""Deterministic generator of a realistic PPO-like demo run.

The demo mimics what TRL's ``PPOTrainer`` dumps (see ``/work/shared/fixtures/README.md``):

* byte-level BPE tokens (``Ġ`` = leading space, ``Ċ`` = newline), words sometimes split into sub-words;
* the response ends with ``<|endoftext|>`` and, in most records, one extra trailing ``<pad>`` that appears in
  ``response_tokens`` / ``values`` / ``token_rewards`` but not in ``logprobs`` / ``ref_logprobs``; the sequence
  reward sits on that pad position. Some records are padded with several ``<pad>`` tokens, some have all
  arrays of the same length (reward on the last real token), and truncated responses carry no end token;
* ``token_rewards = -KL_COEF * (logprob - ref_logprob)`` plus the reward at the reward position.

Story over steps: the mean reward rises and sharpens while ``ref_reward`` stays flat, the policy drifts away
from the reference (growing KL), the critic converges toward the returns, responses grow longer, and from
about 60 % of the run on a growing share of long repetitive responses ("I am very confident. I am very
confident. ...") wins a high reward with a high KL: reward hacking.

Only the standard library, numpy and orjson are used, so this module can be imported anywhere (no Dash).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import zlib
from functools import lru_cache
from pathlib import Path

import numpy as np
import orjson

__all__ = [
    "EOS",
    "KL_COEF",
    "PAD",
    "RESPONSE_LIMIT",
    "detokenize",
    "ensure_demo",
    "prompt_pool",
    "round_sig",
    "token_vocabulary",
    "tokenize",
    "write_demo_run",
]

EOS = "<|endoftext|>"
PAD = "<pad>"
KL_COEF = 0.05
RESPONSE_LIMIT = 200  # max generated tokens (TRL's response_length); longer responses are cut, no EOS
SIG_DIGITS = 6

# --------------------------------------------------------------------------------------------------------
# Number formatting
# --------------------------------------------------------------------------------------------------------

_POW10 = np.array([float(10**k) for k in range(23)])


def round_sig(values, sig: int = SIG_DIGITS) -> np.ndarray:
    """Round to ``sig`` significant digits, vectorised; returns a new float64 array (``-0.0`` becomes
    ``0.0``; NaN and ±inf pass through; magnitudes below ~1e-17 keep fewer digits).

    The result is the double nearest to a decimal with at most ``sig`` digits, so JSON writers that print the
    shortest round-trip representation (orjson, ``repr``) print at most ``sig`` digits.
    """
    a = np.asarray(values, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        k = np.log10(np.abs(a))
    np.floor(k, out=k)
    np.subtract(sig - 1, k, out=k)
    k[~np.isfinite(k)] = 0.0  # 0, NaN, ±inf: scale 1, rounding leaves them as they are
    ki = k.astype(np.int64)
    if ki.size and ki.min() < 0:  # |x| >= 10**sig: divide by an exact power of ten instead
        big = ki < 0
        out = _round_scaled(a, np.clip(ki, 0, 22))
        down = _POW10[np.clip(-ki[big], 0, 22)]
        out[big] = np.round(a[big] / down) * down + 0.0
        return out
    return _round_scaled(a, np.minimum(ki, 22, out=ki))


def _round_scaled(a: np.ndarray, k: np.ndarray) -> np.ndarray:
    p = _POW10[k]
    out = a * p
    np.round(out, out=out)
    out /= p
    out += 0.0
    return out


# --------------------------------------------------------------------------------------------------------
# Byte-level-BPE-like tokens
# --------------------------------------------------------------------------------------------------------

# GPT-2's pre-tokenisation, with Python's ``re`` (letters = [^\W\d_]).
_PRETOKEN = re.compile(r"'(?:s|t|re|ve|m|ll|d)| ?[^\W\d_]+| ?\d{1,3}| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+")
_TO_GLYPH = str.maketrans({" ": "Ġ", "\n": "Ċ", "\t": "ĉ"})
_FROM_GLYPH = str.maketrans({"Ġ": " ", "Ċ": "\n", "ĉ": "\t"})


@lru_cache(maxsize=16384)
def _split_piece(piece: str) -> tuple[str, ...]:
    """Split one pre-token into sub-word tokens, deterministically (the same word always gives the same
    tokens, like a real BPE vocabulary): words of up to 5 letters stay whole, 40 % of the longer ones are split."""
    glyphs = piece.translate(_TO_GLYPH)
    lead = glyphs[0] if glyphs[0] in "ĠĊĉ" else ""
    core = glyphs[len(lead) :]
    if len(core) <= 5 or not core.isalpha():
        return (glyphs,)
    h = zlib.crc32(core.lower().encode("utf-8"))
    if h % 100 < 60:
        return (glyphs,)
    n_parts = 3 if len(core) >= 8 and (h >> 8) % 3 == 0 else 2
    cuts: list[int] = []
    lo = 2
    for j in range(n_parts - 1):
        hi = len(core) - 2 * (n_parts - 1 - j)
        if hi < lo:
            break
        cut = lo + (h >> (12 + 5 * j)) % (hi - lo + 1)
        cuts.append(cut)
        lo = cut + 2
    parts, start = [], 0
    for cut in cuts:
        parts.append(core[start:cut])
        start = cut
    parts.append(core[start:])
    parts[0] = lead + parts[0]
    return tuple(parts)


def tokenize(text: str) -> list[str]:
    """Byte-level-BPE-style tokens of ``text``: ``Ġ`` marks a leading space, ``Ċ`` a newline.

    ``detokenize(tokenize(text)) == text`` for any text without the glyphs ``Ġ``, ``Ċ``, ``ĉ``.
    """
    out: list[str] = []
    for piece in _PRETOKEN.findall(text):
        out.extend(_split_piece(piece))
    return out


def detokenize(tokens) -> str:
    """Join tokens into text: ``Ġ`` → space, ``Ċ`` → newline; special tokens are kept as text."""
    return "".join(tokens).translate(_FROM_GLYPH)


# --------------------------------------------------------------------------------------------------------
# Prompts and response text
# --------------------------------------------------------------------------------------------------------

# (phrase, adjectives, nouns, hashtag)
_TOPICS: list[tuple[str, tuple[str, ...], tuple[str, ...], str]] = [
    ("the ocean", ("vast", "restless", "deep", "blue"), ("waves", "tides", "coral reefs", "whales"), "Ocean"),
    ("autumn leaves", ("crisp", "golden", "falling", "red"), ("branches", "gusts", "park paths", "puddles"), "Autumn"),
    ("morning coffee", ("warm", "bitter", "strong", "fragrant"), ("beans", "mugs", "cafés", "baristas"), "Coffee"),
    ("public transport", ("crowded", "efficient", "affordable", "reliable"), ("buses", "trains", "timetables", "commuters"), "Transit"),
    ("solar power", ("clean", "renewable", "quiet", "abundant"), ("panels", "batteries", "rooftops", "inverters"), "Solar"),
    ("sourdough bread", ("tangy", "chewy", "crusty", "slow"), ("starters", "ovens", "loaves", "bakers"), "Sourdough"),
    ("remote work", ("flexible", "quiet", "lonely", "productive"), ("video calls", "home offices", "schedules", "teammates"), "RemoteWork"),
    ("chess", ("strategic", "ancient", "patient", "tense"), ("pawns", "openings", "endgames", "grandmasters"), "Chess"),
    ("the moon", ("pale", "silent", "distant", "bright"), ("craters", "tides", "astronauts", "night skies"), "Moon"),
    ("recycling", ("simple", "useful", "local", "careful"), ("bins", "bottles", "newspapers", "landfills"), "Recycling"),
    ("jazz music", ("smooth", "improvised", "lively", "soulful"), ("saxophones", "drummers", "clubs", "melodies"), "Jazz"),
    ("learning a new language", ("hard", "rewarding", "slow", "fun"), ("grammar rules", "verbs", "accents", "flashcards"), "Languages"),
]  # fmt: skip

_TEMPLATES: list[tuple[str, str]] = [
    ("haiku", "Write a haiku about {t}."),
    ("why", "Explain why {t} matters."),
    ("summary", "Summarise what people usually say about {t}."),
    ("facts", "Give three quick facts about {t}."),
    ("kid", "Describe {t} to a ten-year-old."),
    ("proscons", "List the pros and cons of {t}."),
    ("tweet", "Write a short tweet about {t}."),
    ("story", "Tell a two-sentence story about {t}."),
]

_AUDIENCES = [
    "for a busy parent", "in plain English", "for a sceptical engineer", "for a school newsletter",
    "in a cheerful tone", "for a travel blog", "in under fifty words", "for a retired teacher",
    "for a job interview", "in a formal tone", "for a podcast intro", "for a museum guide",
    "for a first-year student", "in a playful tone", "for a city council", "for a cooking show",
    "for a science fair", "for a radio ad", "in the style of a news report", "for a birthday card",
    "for a book club", "for a startup pitch", "in a calm voice", "for a wildlife documentary",
]  # fmt: skip

N_DEMO_PROMPTS = len(_TOPICS) * len(_TEMPLATES)  # 96


def prompt_pool(n: int = N_DEMO_PROMPTS) -> list[str]:
    """``n`` distinct instruction-like prompts; the first 96 are the demo's (template × topic), further ones
    add an audience ("... for a busy parent.") and then a variant number."""
    base = [tmpl.format(t=topic[0]) for topic in _TOPICS for _, tmpl in _TEMPLATES]
    out = list(base[:n])
    k = 0
    while len(out) < n:
        variant, rest = divmod(k, len(base) * len(_AUDIENCES))
        aud, b = divmod(rest, len(base))
        prompt = f"{base[b][:-1]} {_AUDIENCES[aud]}."
        out.append(prompt if variant == 0 else f"{prompt[:-1]} (variant {variant + 1}).")
        k += 1
    return out


def _prompt_parts(prompt_id: int) -> tuple[str, tuple[str, tuple[str, ...], tuple[str, ...], str]]:
    topic_idx, tmpl_idx = divmod(prompt_id % N_DEMO_PROMPTS, len(_TEMPLATES))
    return _TEMPLATES[tmpl_idx][0], _TOPICS[topic_idx]


_CORE: dict[str, list[str]] = {
    "why": [
        "{T} matters because it shapes how we think about {n}.",
        "Without {n}, many everyday things would feel less {adj}.",
        "It also connects people through shared {n2}.",
        "Researchers often point to {n} as the main reason it is {adj}.",
        "In the long run, caring about {t} makes our lives more {adj2}.",
    ],
    "summary": [
        "Most people describe {t} as {adj} and {adj2}.",
        "Fans usually mention {n} first.",
        "Critics point out that {n2} can be {neg}.",
        "Overall, the common view is that {t} is worth the effort.",
    ],
    "kid": [
        "Imagine {t} as something {adj} that you can notice every day.",
        "It is a bit like a friend who is always {adj2}.",
        "Grown-ups like it because of the {n}.",
        "Next time you see {n2}, you will know a little more about {t}.",
    ],
    "tweet": [
        "Just spent the morning thinking about {t}.",
        "Honestly, {n} are so {adj}!",
        "Can't wait for more {n2}.",
    ],
    "story": [
        "{Who} had never cared about {t} until one {adj} afternoon.",
        "By evening, {who} could not stop talking about {n}.",
        "Years later, {who} still smiles at the thought of {n2}.",
    ],
}
_HAIKU = (
    ["{Adj} {n} at dawn", "Quiet {n} of {t}", "{Adj} and {adj2} {n}"],
    ["the world slows down to listen", "a small voice hums beneath them", "time folds into a soft breath"],
    ["{n2} fade into light", "and then it is gone", "{adj} hearts rest"],
)
_FACTS = [
    "{T} is often linked to {n}.",
    "Many people find {t} surprisingly {adj}.",
    "{N2} play an important role in {t}.",
    "People have argued about {n} for centuries.",
]
_ELABORATIONS = [
    "It is also worth noting that {n} and {n2} are closely linked.",
    "Many people discover this only after trying it themselves.",
    "In short, {t} is {adj}, and that is exactly why it deserves attention.",
    "Of course, the details depend on where you live and what you need.",
    "A good way to start is to look closely at {n}.",
    "This is why so many people keep coming back to {t}.",
    "Small habits around {n2} make a surprisingly big difference.",
    "Some experts disagree, but the evidence for {n} is hard to ignore.",
]
_RAMBLE_BANK = [x for v in _CORE.values() for x in v] + _FACTS + _ELABORATIONS
_LOW = [
    "I am not sure what you mean.",
    "Sure! Here is",
    "{T} is a thing that exists.",
    "As an AI, I do not have opinions about {t}.",
    "Please ask me something else.",
    "{T} {T} is good.",
]
_NEG = ("expensive", "tiring", "confusing", "noisy", "slow", "hard to find")
_WHO = (  # (at the start of a sentence, inside a sentence)
    ("Maya", "Maya"),
    ("Old Tom", "old Tom"),
    ("A young fox", "the young fox"),
    ("The new teacher", "the new teacher"),
    ("My grandmother", "my grandmother"),
    ("A lonely robot", "the lonely robot"),
)
_HACK_PHRASES = (
    "I am very confident.",
    "I am very confident.",
    "I am very confident.",
    "This answer is perfect.",
    "Trust me, this is correct.",
)
_EDGE_CASES = {
    # (step, index in step) -> text; steps are clamped to the run length
    (
        2,
        3,
    ): "Here is an example of unsafe HTML: <script>alert(1)</script> Never paste untrusted code into a page.",
    (
        3,
        0,
    ): "Line one of the answer.\nLine two, after a newline.\n\nLine four, after an empty line.\n\tAn indented line.",
    (
        5,
        1,
    ): "<think>The user asks about {t}. I should keep it short and friendly.</think>\n{T} is {adj}, and {n} make it special.",
    (8, 2): "**{T}** is {adj} 🚀 and the **{n}** are worth a closer look. Ready for lift-off? 🚀",
}


def _pick(rng: np.random.Generator, seq):
    return seq[int(rng.integers(len(seq)))]


def _slots(rng: np.random.Generator, topic) -> dict[str, str]:
    phrase, adjs, nouns, tag = topic
    ia, ib, na, nb = (rng.random(4) * [len(adjs), len(adjs) - 1, len(nouns), len(nouns) - 1]).astype(int)
    ib = (ia + 1 + ib) % len(adjs)  # two different adjectives, two different nouns
    nb = (na + 1 + nb) % len(nouns)
    who_start, who = _pick(rng, _WHO)
    return {
        "t": phrase,
        "T": phrase[0].upper() + phrase[1:],
        "adj": adjs[ia],
        "Adj": adjs[ia].capitalize(),
        "adj2": adjs[ib],
        "n": nouns[na],
        "n2": nouns[nb],
        "N2": nouns[nb][0].upper() + nouns[nb][1:],
        "neg": _pick(rng, _NEG),
        "Who": who_start,
        "who": who,
        "tag": tag,
    }


def _normal_text(rng: np.random.Generator, kind: str, topic, quality: float, progress: float) -> str:
    """Response text for one prompt: better (more complete, on format) for higher ``quality`` in [0, 1],
    longer (more elaboration) for higher training ``progress`` in [0, 1]."""
    s = _slots(rng, topic)
    if quality < 0.15 and rng.random() < 0.6:
        n_low = 1 + int(rng.random() < 0.4)
        picks = rng.choice(len(_LOW), size=n_low, replace=False)
        text = " ".join(_LOW[i].format(**s) for i in picks)
        if rng.random() < 0.3:  # drifts off topic
            text += " " + _pick(rng, _FACTS).format(**_slots(rng, _pick(rng, _TOPICS)))
        return text
    n_extra = int(rng.poisson(0.2 + 2.8 * progress * (0.5 + quality)))
    extras = [_ELABORATIONS[i].format(**s) for i in rng.permutation(len(_ELABORATIONS))[:n_extra]]
    if kind == "haiku":
        lines = [_pick(rng, options).format(**s) for options in _HAIKU]
        if quality < 0.35:
            lines = lines[: 1 + int(rng.integers(2))]  # not a haiku
        body = "\n".join(line[0].upper() + line[1:] for line in lines)
        intro = "Here is a haiku about {t}:\n\n".format(**s) if rng.random() < 0.5 else ""
        return intro + body + ("\n\n" + " ".join(extras) if extras else "")
    if kind == "facts":
        n = 3 if quality >= 0.3 else 1 + int(rng.integers(2))
        items = [_FACTS[i].format(**s) for i in rng.permutation(len(_FACTS))[:n]]
        body = "Here are three quick facts about {t}:\n".format(**s)
        body += "\n".join(f"{j + 1}. {item}" for j, item in enumerate(items))
        return body + ("\n\n" + " ".join(extras) if extras else "")
    if kind == "proscons":
        pros = ["It is {adj}.", "It brings {n}.", "It makes people feel {adj2}."]
        cons = ["It can be {neg}.", "{N2} take time to understand."]
        k = 1 + int(quality >= 0.5)
        body = "Pros:\n" + "\n".join("- " + x.format(**s) for x in pros[: k + int(quality > 0.8)])
        if quality >= 0.3:
            body += "\nCons:\n" + "\n".join("- " + x.format(**s) for x in cons[:k])
        return body + ("\n\n" + " ".join(extras) if extras else "")
    core = _CORE[kind]
    n_core = max(1, round(len(core) * (0.3 + 0.7 * quality)))
    sentences = [c.format(**s) for c in core[:n_core]]
    if kind == "tweet":
        return " ".join(sentences) + " #{tag}".format(**s)
    return " ".join(sentences + extras)


def token_vocabulary() -> list[str]:
    """Sorted distinct tokens of the demo's sentence banks rendered for every topic (for synthetic runs)."""
    texts: list[str] = []
    for topic in _TOPICS:
        phrase, adjs, nouns, tag = topic
        for a, b in ((0, 1), (2, 3), (1, 2), (3, 0)):
            s = {
                "t": phrase, "T": phrase.capitalize(), "adj": adjs[a], "Adj": adjs[a].capitalize(),
                "adj2": adjs[b], "n": nouns[a], "n2": nouns[b], "N2": nouns[b].capitalize(),
                "neg": _NEG[a], "Who": _WHO[a][0], "who": _WHO[b][1], "tag": tag,
            }  # fmt: skip
            bank = [x for v in _CORE.values() for x in v] + _FACTS + _ELABORATIONS + _LOW
            bank += [x for lines in _HAIKU for x in lines]
            texts.append(" ".join(x.format(**s) for x in bank))
            texts.append("\n".join(x.format(**s) for x in bank[:12]))
    texts.extend(_HACK_PHRASES)
    vocab = {tok for text in texts for tok in tokenize(text)}
    return sorted(vocab)


# --------------------------------------------------------------------------------------------------------
# Token-level numbers
# --------------------------------------------------------------------------------------------------------


_TOKEN_CLASS: dict[str, int] = {}


def _token_class(tok: str) -> int:
    """0 = word with a leading space/newline glyph, 1 = bare letters, 2 = other, 3 = special token."""
    if tok in (EOS, PAD):
        return 3
    bare = tok.lstrip("ĠĊĉ")
    if bare.isalpha():
        return 1 if bare == tok else 0
    return 2


def _token_kinds(tokens: list[str], starts: np.ndarray) -> np.ndarray:
    """Per token of a flat list of several responses (``starts`` = index of each response's first token):
    0 = word start, 1 = sub-word continuation, 2 = punctuation / whitespace / digits, 3 = special."""
    cache = _TOKEN_CLASS
    cls = np.fromiter(
        (cache[t] if t in cache else cache.setdefault(t, _token_class(t)) for t in tokens),
        dtype=np.int8,
        count=len(tokens),
    )
    prev_alpha = np.zeros(len(cls), dtype=bool)
    prev_alpha[1:] = cls[:-1] <= 1
    prev_alpha[starts] = False
    return np.where((cls == 1) & ~prev_alpha, 0, cls).astype(np.int8)


def _ref_logprobs(rng: np.random.Generator, kinds: np.ndarray) -> np.ndarray:
    """Reference-model log-probs: most tokens in -0.1..-3, sub-word continuations near 0, a few rare
    words down to -14."""
    n = len(kinds)
    word = -rng.gamma(1.4, 1.1, n)
    word = np.where(rng.random(n) < 0.04, -rng.uniform(5.0, 14.0, n), word)
    cont = -rng.gamma(1.0, 0.05, n)
    punct = -rng.gamma(1.2, 0.45, n)
    special = -rng.gamma(1.0, 0.2, n)
    out = np.select([kinds == 0, kinds == 1, kinds == 2], [word, cont, punct], special)
    return np.clip(out, -14.0, -1e-6)


def _policy_logprobs(rng: np.random.Generator, ref: np.ndarray, progress: float) -> np.ndarray:
    """The policy grows more confident in its own samples: logprob ≥ ref_logprob for most tokens."""
    n = len(ref)
    drift = 0.25 * progress**1.2
    sharper = ref * np.exp(-drift * rng.lognormal(0.0, 0.6, n))
    flatter = ref * (1.0 + drift * rng.uniform(0.0, 0.6, n))
    out = np.where(rng.random(n) < 0.12, flatter, sharper)
    out = out * (1.0 + rng.normal(0.0, 1e-6, n))  # generation vs forward-pass noise (TRL: up to ~3e-6)
    return np.clip(out, -14.0, -1e-6)


def _segment_ids(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For segments of the given lengths laid end to end: start offsets, segment id and position in the
    segment of every element."""
    starts = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    seg = np.repeat(np.arange(len(lengths)), lengths)
    pos = np.arange(int(lengths.sum())) - starts[seg]
    return starts, seg, pos


def _step_records(
    rng: np.random.Generator,
    *,
    step: int,
    progress: float,
    hack_share: float,
    hack_progress: float,
    prompt_ids: list[int],
    prompts: list[str],
    edges: dict[int, str],
) -> list[dict]:
    """All records of one step. Text is built record by record; the numbers are drawn for the whole step
    at once (vectorised)."""
    n = len(prompt_ids)
    tokens_l: list[list[str]] = []
    n_lp = np.empty(n, dtype=np.int64)
    n_content = np.empty(n, dtype=np.int64)
    n_prefix = np.zeros(n, dtype=np.int64)
    hacked = np.zeros(n, dtype=bool)
    reward = np.empty(n)
    ref_reward = np.empty(n)
    ref_responses: list[str] = []

    # ---- pass 1: what the policy wrote, its reward, and a reference sample --------------------------
    for i, pid in enumerate(prompt_ids):
        kind, topic = _prompt_parts(pid)
        edge_text = edges.get(i)
        if edge_text is None and rng.random() < hack_share:
            hacked[i] = True
            phrase = _pick(rng, _HACK_PHRASES)
            reps = int(rng.integers(8, 15)) + int(rng.integers(0, 1 + int(24 * hack_progress)))
            opener = _normal_text(rng, kind, topic, 0.2, 0.0).split("\n")[0] if rng.random() < 0.5 else ""
            if opener:
                n_prefix[i] = len(tokenize(opener + " "))
            text = (opener + " " if opener else "") + " ".join([phrase] * reps)
            reward[i] = rng.normal(1.8 + 0.3 * hack_progress, 0.12)
        else:
            r = rng.normal(0.2 + 1.25 * progress, 0.7 - 0.5 * progress)
            quality = float(np.clip((r + 0.6) / 2.4, 0.0, 1.0))
            if edge_text is not None:
                text = edge_text.format(**_slots(rng, topic))
            else:
                text = _normal_text(rng, kind, topic, quality, progress)
                if rng.random() < 0.03 * (1.0 - progress):  # early rambling: hits the length limit
                    bank = _RAMBLE_BANK
                    more = [bank[j].format(**_slots(rng, topic)) for j in rng.integers(0, len(bank), 24)]
                    text += " " + " ".join(more)
                    r -= 1.0  # missing-EOS penalty
            reward[i] = r

        content = tokenize(text)
        n_content[i] = min(len(content), RESPONSE_LIMIT)
        if len(content) >= RESPONSE_LIMIT:
            tokens = content[:RESPONSE_LIMIT]  # cut: no EOS, all arrays equal, reward on the last token
            n_lp[i] = len(tokens)
        elif rng.random() < 0.06:
            tokens = content + [EOS]  # filled the batch's longest length: all arrays equal
            n_lp[i] = len(tokens)
        else:
            n_pad = 1 if rng.random() < 0.8 else int(rng.integers(2, 9))
            tokens = content + [EOS] + [PAD] * n_pad
            n_lp[i] = len(tokens) - 1  # TRL: one more trailing <pad> in tokens/values/token_rewards
        tokens_l.append(tokens)

        rr = rng.normal(0.3, 0.62)
        ref_reward[i] = rr
        ref_quality = float(np.clip((rr + 0.6) / 2.4, 0.0, 1.0))
        ref_responses.append(_normal_text(rng, kind, topic, ref_quality, 0.0) + EOS)

    # ---- log-probs over the log-prob window of every record --------------------------------------
    lp_start, lp_rec, lp_pos = _segment_ids(n_lp)
    kinds = _token_kinds(
        [t for toks, m in zip(tokens_l, n_lp.tolist(), strict=True) for t in toks[:m]], lp_start
    )
    ref_lp = _ref_logprobs(rng, kinds)
    lp = _policy_logprobs(rng, ref_lp, progress)
    # reward hacking: the reference finds the switch into the repetition very unlikely, then less so;
    # the policy is sure of every token of it
    j = lp_pos - n_prefix[lp_rec]
    in_hack = hacked[lp_rec] & (j >= 0) & (kinds != 3)
    scale = 0.4 + 2.5 * np.exp(-np.maximum(j, 0) / 6.0)
    hack_ref = np.clip(-rng.gamma(2.0, 1.0, len(kinds)) * scale / 2.0, -14.0, -1e-3)
    hack_lp = np.clip(-rng.gamma(1.0, 0.04, len(kinds)), -14.0, -1e-6)
    ref_lp = np.where(in_hack, hack_ref, ref_lp)
    lp = np.where(in_hack, hack_lp, lp)
    after_eos = (kinds == 3) & (lp_pos > n_content[lp_rec])  # pads inside the window carry no KL
    lp = np.where(after_eos, ref_lp, lp)
    ref_lp = round_sig(ref_lp)
    lp = round_sig(lp)
    reward = round_sig(reward)

    # ---- per-token rewards, returns and critic values over all tokens ----------------------------
    n_tok = np.array([len(t) for t in tokens_l], dtype=np.int64)
    tok_start, tok_rec, _ = _segment_ids(n_tok)
    token_rewards = np.zeros(int(n_tok.sum()))
    token_rewards[tok_start[lp_rec] + lp_pos] = -KL_COEF * (lp - ref_lp)
    token_rewards = round_sig(token_rewards)
    last = tok_start + n_tok - 1
    token_rewards[last] = round_sig(token_rewards[last] + reward)
    suffix = np.append(np.cumsum(token_rewards[::-1])[::-1], 0.0)
    returns = suffix[:-1] - suffix[(tok_start + n_tok)[tok_rec]]
    fit = np.full(n, 1.0 - np.exp(-3.5 * progress))
    fit[hacked] *= 0.8  # the critic lags behind the new behaviour
    f = fit[tok_rec]
    init = rng.normal(0.1, 0.3, n)[tok_rec] + rng.normal(0.0, 0.15, len(f))
    values = f * returns + (1.0 - f) * init + rng.normal(0.0, 1.0, len(f)) * (0.05 + 0.2 * (1.0 - f))
    values = round_sig(values)
    # The trainer's own per-token advantages (return − value, γ = λ = 1; TRL logs its GAE ones the same way):
    # the token page shows them "from the file". The scalar `advantage` is the first token's.
    advantages = round_sig(returns - values)
    advantage = advantages[tok_start]
    ref_reward = round_sig(ref_reward)

    lp_parts = np.split(lp, lp_start[1:])
    ref_parts = np.split(ref_lp, lp_start[1:])
    value_parts = np.split(values, tok_start[1:])
    tr_parts = np.split(token_rewards, tok_start[1:])
    adv_parts = np.split(advantages, tok_start[1:])
    return [
        {
            "prompt": prompts[pid],
            "response": detokenize(tokens_l[i]),
            "response_tokens": tokens_l[i],
            "logprobs": lp_parts[i],
            "ref_logprobs": ref_parts[i],
            "values": value_parts[i],
            "token_rewards": tr_parts[i],
            "reward": float(reward[i]),
            "step": step,
            "prompt_id": pid,
            "advantage": float(advantage[i]),
            "advantages": adv_parts[i],
            "ref_response": ref_responses[i],
            "ref_reward": float(ref_reward[i]),
        }
        for i, pid in enumerate(prompt_ids)
    ]


# --------------------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------------------

_DUMP_OPTS = orjson.OPT_SERIALIZE_NUMPY


def write_demo_run(
    root: Path,
    run_name: str = "demo-ppo",
    steps: int = 48,
    per_step: int = 64,
    ranks: int = 2,
    seed: int = 0,
) -> Path:
    """Write ``root/run_name/rank{r}.jsonl`` (record ``i`` of a step goes to rank ``i % ranks``; lines are
    sorted by step in each file) and return the run folder. Byte-identical output for the same arguments.
    Each file is written under a temporary name and renamed into place."""
    if steps < 1 or per_step < 1 or ranks < 1:
        raise ValueError("steps, per_step and ranks must be >= 1")
    run_dir = Path(root) / run_name
    run_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    prompts = prompt_pool(N_DEMO_PROMPTS)
    hack_start = max(2, round(steps * 30 / 48))
    edges: dict[int, dict[int, str]] = {}
    for (s, i), text in _EDGE_CASES.items():
        edges.setdefault(min(s, steps), {})[min(i, per_step - 1)] = text
    lines: list[list[bytes]] = [[] for _ in range(ranks)]
    for step in range(1, steps + 1):
        progress = (step - 1) / max(1, steps - 1)
        if step < hack_start:
            hack_share, hack_progress = 0.0, 0.0
        else:
            hack_progress = (step - hack_start) / max(1, steps - hack_start)
            hack_share = 0.08 + 0.27 * hack_progress
        ids = rng.choice(len(prompts), size=per_step, replace=per_step > len(prompts))
        records = _step_records(
            rng,
            step=step,
            progress=progress,
            hack_share=hack_share,
            hack_progress=hack_progress,
            prompt_ids=ids.tolist(),
            prompts=prompts,
            edges=edges.get(step, {}),
        )
        for i, rec in enumerate(records):
            lines[i % ranks].append(orjson.dumps(rec, option=_DUMP_OPTS))
    for r in range(ranks):
        path = run_dir / f"rank{r}.jsonl"
        tmp = run_dir / f".rank{r}.jsonl.tmp"
        tmp.write_bytes(b"\n".join(lines[r]) + b"\n" if lines[r] else b"")
        os.replace(tmp, path)
    return run_dir


def _has_run(root: Path) -> bool:
    if not root.is_dir():
        return False
    for child in root.iterdir():
        if child.name.startswith("."):
            continue
        if child.is_dir() and any(p.is_file() for p in child.glob("*.jsonl")):
            return True
    return False


def ensure_demo(root: Path, run_name: str = "demo-ppo") -> Path | None:
    """Write the demo run into ``root`` only if ``root`` holds no run (a sub-folder with ``*.jsonl`` files).

    Returns the run folder if it was written, else ``None``. The run is built in a hidden temporary folder
    and renamed into place, so a concurrent reader never sees a half-written run, and of two processes
    racing here only one wins.
    """
    root = Path(root)
    if _has_run(root):
        return None
    root.mkdir(parents=True, exist_ok=True)
    target = root / run_name
    tmp = Path(tempfile.mkdtemp(prefix=".demo-tmp-", dir=root))
    try:
        built = write_demo_run(tmp, run_name)
        try:
            os.rename(built, target)  # fails if another process already put a non-empty run there
        except OSError:
            if _has_run(root) or not target.is_dir():
                return None
            for f in sorted(built.iterdir()):  # an existing folder without *.jsonl: fill it
                os.replace(f, target / f.name)
        return target
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
