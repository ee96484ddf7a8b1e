"""Tag canonicalisation: one spelling per idea, so tags converge instead of drifting.

Contract:

- ``tag_normalise(raw)`` gives the surface form every stored tag has: accents
  stripped, lowercase, quotes removed, any run of other punctuation, spaces or
  underscores turned into one hyphen, a repeated word collapsed, a leading
  article dropped, at most ``MAX_TAG_CHARS`` characters (cut at a hyphen when
  possible). A tag made only of stop words normalises to ``""`` (no tag).
- ``tag_fold(name)`` folds English plurals word by word (``databases`` →
  ``database``, ``queries`` → ``query``, ``boxes`` → ``box``) and leaves alone
  the words that only look plural (``analysis``, ``status``, ``news``,
  ``series``, ``physics``, ``kubernetes`` …: the exception lists below).
- ``tag_canonical(raw, vocab)`` = normalise, then the first hit of: an existing
  name, an alias (followed to its target), the folded form as a name or alias,
  an existing name that folds to the same thing; otherwise the folded form,
  a new tag. ``TagCanon`` does the same with its index built once, and can learn
  names created mid-batch (``add``).
- ``alias_suggestions(vocab)`` proposes ``(alias, target, score)`` pairs for a
  person or an LLM to confirm; it never merges anything itself.
- ``tags_to_split`` names tags that cover too much of a conversation, and
  ``tag_split_plan`` proposes, for one of them, a more specific tag per turn.
  The old name is then kept as an alias of the largest new tag (see
  ``tag_split_alias``): old references keep resolving, to the sub-topic that
  most of the old turns went to, and turns with no distinctive keyphrase are
  put in that same largest group so the alias and the plan agree.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping

from memory_app.engine.types import TagVocabulary, TurnView

MAX_TAG_CHARS = 40


def word_set(words: str) -> frozenset[str]:
    """A frozenset of the whitespace-separated words: readable word lists."""
    return frozenset(words.split())


STOP_WORDS: frozenset[str] = word_set(
    """
    a about above after again against all also am an and any are as at be because been
    before being below between both but by can cannot could did do does doing done down
    during each either etc few for from further had has have having he her here hers
    herself him himself his how however i if in into is it its itself just let lets me
    might more most must my myself neither no nor not now of off on once only or other
    otherwise ought our ours ourselves out over own per same shall she should since so
    some such than that the their theirs them themselves then there therefore these they
    this those though through thus to too under until up upon us very via was we were
    what whatever when whenever where whether which while who whoever whom whose why will
    with within without would yet you your yours yourself yourselves
    aren arent can't cant couldn couldnt didn didnt doesn doesnt don dont hadn hadnt hasn
    hasnt haven havent he'd he'll he's hes i'd i'll i'm i've id ill im isn isnt it'd
    it'll it's ive let's mightn mustn needn shan shan't she'd she'll she's shouldn
    shouldnt that's thats there's theres they'd they'll they're they've theyd theyll
    theyre theyve wasn wasnt we'd we'll we're we've weren werent weve what's whats who's
    won won't wont wouldn wouldnt you'd you'll you're you've youd youll youre youve
    """
)

# Conversational words that say nothing about a topic: never a keyphrase or a
# split qualifier, though a tag an LLM chose may still contain them.
FILLER_WORDS: frozenset[str] = word_set(
    """
    able actually add additionally again ago ahead alright already always amazing answer anybody
    anyone anything anyway anywhere appreciate around ask asked asking awesome bad based
    basically best better big bit brilliant came can cause certainly cheers change check choice
    come comes coming consider cool correct could day days definitely different does doing
    done easily easy else enough ensure even ever every everyone everything exactly example
    excellent fantastic fine finally first following found generally get gets getting give
    given gives glad go goes going gone good got great guess hello help helpful here
    hey hi hmm hope however idea important include includes including instead interesting
    just keep kind know known last later least less let like likely little long look
    looking looks lot lots lovely made main make makes making many may maybe mean means
    mention mentioned much need needed needs new nice next nope note often okay old one
    ones overall perfect please point possible pretty probably proceed provide provided
    provides put question quite rather reason really right said say says second see seem seems set shall
    show simple simply something sometimes soon sort sound sounds specific start step
    steps still stuff sure take tell thank thanks thing things think third thought time
    times today tomorrow tried try trying two typically use used uses using usually want
    wanted wants way ways well went whole wonderful work works wow yeah yes yesterday
    """
)

# Words that end like a plural but are not one (or are names).
_NOT_PLURAL: frozenset[str] = word_set(
    """
    aerobics acoustics aesthetics always analytics athens athletics billiards bitcoins
    ceramics chaos christmas clothes congrats darts diabetes dynamics earnings economics
    electronics ergonomics ethics express forensics genetics goods graphics gymnastics
    headquarters herpes informatics jeans jenkins kinematics kubernetes kudos lens
    linguistics logistics mathematics means measles mechanics mumps netherlands news
    numerics optics pandas pants paris perhaps philippines physics politics postgres
    premises rabies rails robotics sales savings scabies scissors semantics series
    sometimes species statistics surroundings thanks thermodynamics trousers vegas wales
    whereabouts windows
    """
)
# Singular words ending -ie, so "-ies" folds to "-ie" rather than "-y".
_IE_STEMS: frozenset[str] = word_set(
    """
    auntie birdie boogie brownie budgie calorie cookie die eerie foodie freebie genie
    goalie hippie hoodie indie lie lingerie movie newbie pie prairie rookie selfie smoothie
    sortie tie veggie zombie
    """
)
# Singular words ending -che, so "-ches" folds to "-che" rather than "-ch".
_CHE_STEMS: frozenset[str] = word_set(
    "ache avalanche cache cliche creche headache moustache mustache niche psyche quiche"
)
# Singular words whose plural adds "-es" although they end in neither x, ch, sh, ss nor zz.
_ES_STEMS: frozenset[str] = word_set(
    """
    alias apparatus atlas bias bonus bus cactus campus canvas census circus consensus corpus
    echo focus gas genius hero hiatus iris nexus octopus plus potato prospectus status
    surplus syllabus thesaurus tomato torpedo veto virus volcano
    """
)
_IRREGULAR: Mapping[str, str] = {
    "analyses": "analysis",
    "appendices": "appendix",
    "calves": "calf",
    "children": "child",
    "crises": "crisis",
    "criteria": "criterion",
    "diagnoses": "diagnosis",
    "elves": "elf",
    "feet": "foot",
    "geese": "goose",
    "halves": "half",
    "hypotheses": "hypothesis",
    "indices": "index",
    "knives": "knife",
    "leaves": "leaf",
    "lives": "life",
    "loaves": "loaf",
    "matrices": "matrix",
    "men": "man",
    "mice": "mouse",
    "phenomena": "phenomenon",
    "selves": "self",
    "shelves": "shelf",
    "teeth": "tooth",
    "theses": "thesis",
    "thieves": "thief",
    "vertices": "vertex",
    "wives": "wife",
    "wolves": "wolf",
    "women": "woman",
}
_SINGULAR_ENDINGS = ("ss", "us", "is", "ous")
_GENERIC_QUALIFIERS: frozenset[str] = word_set(
    """
    advice basic chat config configuration detail discussion general help info information
    issue misc note overview problem question related setup stuff talk thing tip topic
    update usage
    """
)

_QUOTES = re.compile(r"[\"'`´‘’“”«»]")
_SEPARATORS = re.compile(r"[\W_]+")
_WORD = re.compile(r"[^\W\d_][^\W_]*(?:'[^\W_]+)?")
_DIGITS = re.compile(r"\d+")
_ARTICLES = frozenset({"a", "an", "the"})


# ---------------------------------------------------------------- normalise and fold


def text_words(text: str) -> list[str]:
    """The words of any text as tags spell them: no accents, lowercase, no quotes."""
    text = unicodedata.normalize("NFKD", text)
    text = "".join(ch for ch in text if not unicodedata.combining(ch)).lower()
    return [w for w in _SEPARATORS.split(_QUOTES.sub("", text)) if w]


def tag_normalise(raw: str) -> str:
    """The stored surface form of a tag, or ``""`` when nothing topical is left."""
    words = text_words(raw)
    words = [w for i, w in enumerate(words) if i == 0 or w != words[i - 1]]
    while len(words) > 1 and words[0] in _ARTICLES:
        words.pop(0)
    if all(w in STOP_WORDS for w in words):
        return ""
    return _clip("-".join(words))


def _clip(name: str) -> str:
    if len(name) <= MAX_TAG_CHARS:
        return name
    cut = name.rfind("-", 0, MAX_TAG_CHARS + 1)
    return name[:cut] if cut > 0 else name[:MAX_TAG_CHARS]


def word_fold(word: str) -> str:
    """One word's singular form, by rule and the exception lists."""
    if len(word) <= 3 or word in _NOT_PLURAL or not word.endswith("s"):
        return word
    if word in _IRREGULAR:
        return _IRREGULAR[word]
    if word.endswith(_SINGULAR_ENDINGS):
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-1] if word[:-1] in _IE_STEMS else word[:-3] + "y"
    if word.endswith("es") and _es_plural(word):
        return word[:-2]
    return word[:-1]


def _es_plural(word: str) -> bool:
    stem = word[:-2]
    if stem in _ES_STEMS:
        return True
    if stem.endswith("ch"):
        return word[:-1] not in _CHE_STEMS
    return stem.endswith(("x", "sh", "ss", "zz"))


def tag_fold(name: str) -> str:
    """A normalised tag with every word folded to its singular."""
    return "-".join(word_fold(w) for w in name.split("-"))


# ---------------------------------------------------------------- canonical names


class TagCanon:
    """``tag_canonical`` against one vocabulary, with the fold index built once.

    ``add`` registers a name created after construction (a tagger's earlier
    turns in the same batch), so later candidates converge on it too."""

    def __init__(self, vocab: TagVocabulary) -> None:
        self._counts: dict[str, int] = dict(vocab.counts)
        self._aliases = {tag_normalise(k): v for k, v in vocab.aliases.items() if tag_normalise(k)}
        self._by_fold: dict[str, str] = {}
        for name in sorted(self._counts, key=lambda n: (-self._counts[n], n)):
            self._by_fold.setdefault(tag_fold(name), name)
        for alias in sorted(self._aliases):
            self._by_fold.setdefault(tag_fold(alias), self._resolve(alias))

    def __contains__(self, name: object) -> bool:
        return name in self._counts

    def add(self, name: str, count: int = 0) -> None:
        if name and name not in self._counts:
            self._counts[name] = count
            self._by_fold.setdefault(tag_fold(name), name)

    def canonical(self, raw: str) -> str:
        name = tag_normalise(raw)
        if not name:
            return ""
        folded = tag_fold(name)
        for candidate in (name, folded):
            if candidate in self._counts:
                return candidate
            if candidate in self._aliases:
                return self._resolve(candidate)
        return self._by_fold.get(folded, folded)

    def _resolve(self, alias: str) -> str:
        seen = {alias}
        target = tag_normalise(self._aliases[alias]) or alias
        while target in self._aliases and target not in self._counts and target not in seen:
            seen.add(target)
            target = tag_normalise(self._aliases[target]) or target
        return target


def tag_canonical(raw: str, vocab: TagVocabulary) -> str:
    """The vocabulary's name for ``raw`` (or the new name it would get); ``""`` for none."""
    return TagCanon(vocab).canonical(raw)


# ---------------------------------------------------------------- alias suggestions


def alias_suggestions(
    vocab: TagVocabulary, threshold: float = 0.85
) -> list[tuple[str, str, float]]:
    """Pairs ``(alias, target, score)`` of existing tags that likely name one thing.

    Scores: 1.0 same after folding, 0.98 same without hyphens, the difflib ratio
    for near-spellings (``colour``/``color``; not when they differ in a number,
    in a short word, or at the start of a word: ``sync``/``async``), 0.9 or 0.7
    for a rare compound of a common tag (``postgres-setup`` with 1 turn next to
    ``postgres`` with 30; 0.9 when the extra word is generic). Only pairs at or
    above ``threshold`` are returned, best first. The alias is the rarer tag."""
    counts = vocab.counts
    names = sorted(counts)
    found: dict[tuple[str, str], float] = {}
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            score, alias, target = _sameness(a, b, counts, threshold)
            if score >= threshold:
                found[(alias, target)] = max(found.get((alias, target), 0.0), score)
    return sorted(
        ((alias, target, round(score, 3)) for (alias, target), score in found.items()),
        key=lambda s: (-s[2], s[0], s[1]),
    )


def _sameness(
    a: str, b: str, counts: Mapping[str, int], threshold: float
) -> tuple[float, str, str]:
    alias, target = _rarer_first(a, b, counts)
    if tag_fold(a) == tag_fold(b):
        if tag_fold(target) != target and tag_fold(alias) == alias:
            alias, target = target, alias
        return 1.0, alias, target
    if a.replace("-", "") == b.replace("-", ""):
        return 0.98, alias, target
    compound = _compound_score(a, b, counts)
    if compound[0] >= threshold:
        return compound
    return _edit_score(a, b, threshold), alias, target


def _rarer_first(a: str, b: str, counts: Mapping[str, int]) -> tuple[str, str]:
    ranked = sorted((a, b), key=lambda n: (-counts.get(n, 0), len(n), n))
    return ranked[1], ranked[0]


def _compound_score(a: str, b: str, counts: Mapping[str, int]) -> tuple[float, str, str]:
    short, long = sorted((a, b), key=lambda n: (n.count("-"), n))
    ws, wl = short.split("-"), long.split("-")
    if len(wl) != len(ws) + 1:
        return 0.0, long, short
    if wl[: len(ws)] == ws:
        extra = wl[-1]
    elif wl[1:] == ws:
        extra = wl[0]
    else:
        return 0.0, long, short
    rare, common = counts.get(long, 0), counts.get(short, 0)
    if rare > 2 or common < 5 * max(rare, 1):
        return 0.0, long, short
    return (0.9 if extra in _GENERIC_QUALIFIERS else 0.7), long, short


def _edit_score(a: str, b: str, threshold: float) -> float:
    if min(len(a), len(b)) < 5 or _DIGITS.findall(a) != _DIGITS.findall(b):
        return 0.0
    wa, wb = a.split("-"), b.split("-")
    if len(wa) == len(wb):
        changed = [(x, y) for x, y in zip(wa, wb, strict=True) if x != y]
        if any(min(len(x), len(y)) < 5 or x[0] != y[0] for x, y in changed):
            return 0.0
    elif _first_difference_starts_word(a, b):
        return 0.0
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    if matcher.real_quick_ratio() < threshold or matcher.quick_ratio() < threshold:
        return 0.0
    return matcher.ratio()


def _first_difference_starts_word(a: str, b: str) -> bool:
    i = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))

    def starts(s: str) -> bool:
        return i >= len(s) or i == 0 or "-" in (s[i - 1], s[i])

    return starts(a) and starts(b)


# ---------------------------------------------------------------- splitting broad tags


def tags_to_split(
    vocab: TagVocabulary, total_turns: int, share: float = 0.35, min_turns: int = 20
) -> list[str]:
    """Tags on more than ``share`` of the turns and at least ``min_turns`` turns, widest first."""
    if total_turns <= 0:
        return []
    broad = [
        (count, name)
        for name, count in vocab.counts.items()
        if count >= min_turns and count > share * total_turns
    ]
    return [name for count, name in sorted(broad, key=lambda c: (-c[0], c[1]))]


def tag_split_plan(
    tag: str,
    turns: list[TurnView],
    vocab: TagVocabulary,
    *,
    max_subtags: int = 5,
    min_support: int = 2,
    max_share: float = 0.6,
) -> dict[int, str]:
    """Turn position → a more specific tag, for every turn carrying ``tag``.

    A turn's qualifier is its most frequent *distinctive* keyphrase among the
    tag's turns: one on at least ``min_support`` of them but at most
    ``max_share`` (a word on nearly all of them distinguishes nothing). Its
    other tags count as keyphrases. Turns without one join the largest group.
    ``{}`` when fewer than two groups emerge: the tag is broad but uniform."""
    canon = TagCanon(vocab)
    own = set(tag.split("-"))
    terms = {t.position: _split_terms(t, tag, own, canon) for t in turns if tag in t.tags}
    df = Counter(term for found in terms.values() for term in found)
    ceiling = max_share * len(terms)
    distinctive = {term: n for term, n in df.items() if min_support <= n <= ceiling}
    first = Counter(_best_term(found, distinctive) for found in terms.values())
    first.pop("", None)
    kept = [term for term, _ in sorted(first.items(), key=lambda kv: (-kv[1], kv[0]))]
    kept_df = {term: distinctive[term] for term in kept[:max_subtags]}
    chosen = {pos: _best_term(found, kept_df) for pos, found in terms.items()}
    sizes = Counter(term for term in chosen.values() if term)
    if len(sizes) < 2:
        return {}
    largest = min(sizes, key=lambda term: (-sizes[term], term))
    return {pos: _subtag(tag, term or largest, canon) for pos, term in chosen.items()}


def tag_split_alias(plan: Mapping[int, str]) -> str:
    """The tag the split one becomes an alias of: the plan's largest group."""
    sizes = Counter(plan.values())
    return min(sizes, key=lambda name: (-sizes[name], name)) if sizes else ""


def _split_terms(turn: TurnView, tag: str, own: set[str], canon: TagCanon) -> Counter[str]:
    found: Counter[str] = Counter()
    for other in turn.tags:
        rest = [w for w in other.split("-") if w not in own]
        if other != tag and rest:
            found["-".join(rest)] += 2  # a curated tag outweighs a passing word
    for word in _content_words(turn.text):
        if word not in own and canon.canonical(word) != tag:
            found[word] += 1
    return found


def _content_words(text: str) -> Iterable[str]:
    for raw in _WORD.findall(text.lower()):
        word = word_fold(raw.replace("'", ""))
        if len(word) >= 3 and word not in STOP_WORDS and word not in FILLER_WORDS:
            yield word


def _best_term(found: Counter[str], df: Mapping[str, int]) -> str:
    eligible = [term for term in found if term in df]
    if not eligible:
        return ""
    return min(eligible, key=lambda term: (-df[term], -found[term], term))


def _subtag(tag: str, term: str, canon: TagCanon) -> str:
    return canon.canonical(f"{tag}-{term}") or tag
