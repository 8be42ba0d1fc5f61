"""The demo's text: byte-level-BPE-like tokens, the prompt pool (template x topic) and response texts of a
given quality, with the special tokens TRL writes (``<|endoftext|>``, ``<pad>``).

Only the standard library and numpy, so it can be imported anywhere (no Dash).
"""

from __future__ import annotations

import re
import zlib
from functools import lru_cache

import numpy as np

EOS = "<|endoftext|>"
PAD = "<pad>"

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


def prompt_parts(prompt_id: int) -> tuple[str, tuple[str, tuple[str, ...], tuple[str, ...], str]]:
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
RAMBLE_BANK = [x for v in _CORE.values() for x in v] + _FACTS + _ELABORATIONS
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
HACK_PHRASES = (
    "I am very confident.",
    "I am very confident.",
    "I am very confident.",
    "This answer is perfect.",
    "Trust me, this is correct.",
)
EDGE_CASES = {
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


def pick(rng: np.random.Generator, seq):
    return seq[int(rng.integers(len(seq)))]


def slots(rng: np.random.Generator, topic) -> dict[str, str]:
    phrase, adjs, nouns, tag = topic
    ia, ib, na, nb = (rng.random(4) * [len(adjs), len(adjs) - 1, len(nouns), len(nouns) - 1]).astype(int)
    ib = (ia + 1 + ib) % len(adjs)  # two different adjectives, two different nouns
    nb = (na + 1 + nb) % len(nouns)
    who_start, who = pick(rng, _WHO)
    return {
        "t": phrase,
        "T": phrase[0].upper() + phrase[1:],
        "adj": adjs[ia],
        "Adj": adjs[ia].capitalize(),
        "adj2": adjs[ib],
        "n": nouns[na],
        "n2": nouns[nb],
        "N2": nouns[nb][0].upper() + nouns[nb][1:],
        "neg": pick(rng, _NEG),
        "Who": who_start,
        "who": who,
        "tag": tag,
    }


def normal_text(rng: np.random.Generator, kind: str, topic, quality: float, progress: float) -> str:
    """Response text for one prompt: better (more complete, on format) for higher ``quality`` in [0, 1],
    longer (more elaboration) for higher training ``progress`` in [0, 1]."""
    s = slots(rng, topic)
    if quality < 0.15 and rng.random() < 0.6:
        n_low = 1 + int(rng.random() < 0.4)
        picks = rng.choice(len(_LOW), size=n_low, replace=False)
        text = " ".join(_LOW[i].format(**s) for i in picks)
        if rng.random() < 0.3:  # drifts off topic
            text += " " + pick(rng, _FACTS).format(**slots(rng, pick(rng, _TOPICS)))
        return text
    n_extra = int(rng.poisson(0.2 + 2.8 * progress * (0.5 + quality)))
    extras = [_ELABORATIONS[i].format(**s) for i in rng.permutation(len(_ELABORATIONS))[:n_extra]]
    if kind == "haiku":
        lines = [pick(rng, options).format(**s) for options in _HAIKU]
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
    texts.extend(HACK_PHRASES)
    vocab = {tok for text in texts for tok in tokenize(text)}
    return sorted(vocab)
