"""Query and document tokenisation shared by every keyword index.

`keyword_text` is the one rule for what a keyword index sees of a text, and `keyword_terms`
the query words it is searched with: both backends of the index (SQLite FTS5 and
PostgreSQL's tsvector) index `keyword_text` of every field and look up `keyword_terms`, so
they agree on what matches (docs/search.md, "Languages and scripts").
"""

from __future__ import annotations

import functools
import re
import sys
import unicodedata

_WORD = re.compile(r"\w+", re.UNICODE)

# Words so common that matching them ranks nothing but costs a scan of most rows. "many"
# and "much" are the quantifiers of "how many / how much": the question asks for a count,
# and passages that say "many" are no nearer to it (docs/performance.md, "Search: levers
# on both benchmarks").
STOPWORDS = frozenset(
    """a an and are as at be but by do does did for from had has have he her hers him his
    how i if in into is it its many me much my no not of on or our ours she so than that
    the their them then there these they this those to too us was we were what when where
    which who whom why will with you your yours""".split()
)

MAX_QUERY_TERMS = 32

# The FTS5 tokenizer of every keyword table (the index's and its scratch table): combining
# marks are part of a word, as PostgreSQL's parser has them (Thai, Devanagari), and no
# diacritic is removed there, `keyword_text` having done it for both backends.
FTS5_TOKENIZER = "porter unicode61 remove_diacritics 0 categories 'L* N* Co M*'"

# Scripts written without spaces between words, and Hangul (whose words carry their
# particles): a run of them is indexed as its overlapping pairs of characters (and each
# ideograph and Hangul syllable alone), searched by the pairs of the query's run.
# Ideographs (CJK Unified, extensions A to H, compatibility), kana, Hangul, Thai, Lao,
# Khmer, Myanmar.
_DENSE_RANGES = (
    "\u0e01-\u0e2e\u0e30-\u0e4e\u0e50-\u0e59"  # Thai letters, vowels, marks, digits
    "\u0e81-\u0ebe\u0ec0-\u0ece\u0ed0-\u0ed9"  # Lao
    "\u1000-\u1049\u1050-\u109d"  # Myanmar (without its punctuation)
    "\u1780-\u17d3\u17dd\u17e0-\u17e9"  # Khmer
    "\u1100-\u11ff\u3131-\u318e\ua960-\ua97f\uac00-\ud7a3\ud7b0-\ud7ff"  # Hangul
    "\u3005-\u3007\u3041-\u3096\u3099-\u309f\u30a1-\u30fa\u30fc-\u30ff\u31f0-\u31ff"  # kana
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f"  # ideographs
)
_DENSE = re.compile(f"[{_DENSE_RANGES}]+")
# The characters that are words alone too (a one-character Chinese word, a one-syllable
# Korean noun before its particle: 猫, 집 in 집에): indexed alone as well as in pairs.
_ALONE = re.compile("[\u3005\u3007\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
                    "\U00020000-\U0003134f\uac00-\ud7a3]")
# Diacritics a reader leaves out: the combining marks of Latin and Greek letters after NFD
# (é, ö, ệ, ά; Cyrillic й and ё are letters of their own and keep theirs), Hebrew points
# and cantillation, Arabic harakat and the tatweel.
_LATIN_GREEK = "A-Za-z\u00c0-\u024f\u0370-\u03ff\u1e00-\u1fff"
_FOLDABLE = re.compile(f"(?<=[{_LATIN_GREEK}])[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff]+")
_POINTS = re.compile("[\u0591-\u05bd\u05bf\u05c1\u05c2\u05c4\u05c5\u05c7"
                     "\u0610-\u061a\u064b-\u065f\u0670\u0640]")
_LETTERS = str.maketrans({"ı": "i"})  # Turkish dotless i: "IRMAK" and "ırmak" alike


@functools.cache
def _keyword_word() -> re.Pattern[str]:
    """A query word: a run of word characters and combining marks (a Thai or Devanagari
    word holds marks; ``\\w`` alone cut it into pieces). Built once, on first use."""
    marks, start, last = [], -2, -2
    for code in range(sys.maxunicode + 1):
        if unicodedata.category(chr(code))[0] == "M":
            if code != last + 1:
                if start >= 0:
                    marks.append((start, last))
                start = code
            last = code
    marks.append((start, last))
    ranges = "".join(re.escape(chr(a)) + ("-" + re.escape(chr(b)) if b > a else "")
                     for a, b in marks)
    return re.compile(f"[\\w{ranges}]+")


def _units(run: str) -> list[str]:
    """A dense run's characters, each with the combining marks that follow it."""
    units: list[str] = []
    for ch in run:
        if units and unicodedata.category(ch)[0] == "M":
            units[-1] += ch
        else:
            units.append(ch)
    return units


def _pairs(run: str, query: bool) -> str:
    units = _units(run)
    if len(units) == 1:
        return f" {units[0]} "
    out: list[str] = []
    for i, unit in enumerate(units):
        if not query and _ALONE.match(unit):
            out.append(unit)
        if i + 1 < len(units):
            out.append(unit + units[i + 1])
    return " " + " ".join(out) + " "


def keyword_text(text: str, query: bool = False) -> str:
    """What a keyword index sees of ``text`` (a field, a passage, or a query when
    ``query``): the one rule both backends apply, so they match alike.

    ASCII text is returned as it is (each backend lowercases and stems it). Other text is
    put in NFKC (an NFD spelling and the NFC one become one; full-width letters and
    digits, ligatures become plain ones), case-folded (ß is ss, final ς is σ, İ is i),
    freed of the diacritics a reader may leave out (café is cafe; Hebrew points and
    Arabic harakat go; Cyrillic й stays), and each run of a script written without spaces
    (Chinese, Japanese, Thai, Lao, Khmer, Myanmar) or of Hangul is spelled as its
    overlapping character pairs, each ideograph and Hangul syllable also alone; a
    query's run as its pairs only (one character: itself), so a word inside a stored
    sentence is found."""
    if text.isascii():
        return text
    text = unicodedata.normalize("NFKC", text).casefold().translate(_LETTERS)
    text = _FOLDABLE.sub("", unicodedata.normalize("NFD", text))
    text = _POINTS.sub("", unicodedata.normalize("NFC", text))
    return _DENSE.sub(lambda m: _pairs(m.group(), query), text)


def words(text: str) -> list[str]:
    """Lower-cased word tokens, in order, stopwords kept."""
    return [w.lower() for w in _WORD.findall(text)]


def _distinct_content(found: list[str]) -> list[str]:
    seen: dict[str, None] = {}
    for word in found:
        if word not in STOPWORDS and word not in seen:
            seen[word] = None
    terms = list(seen) or list(dict.fromkeys(found))
    return terms[:MAX_QUERY_TERMS]


def query_terms(text: str) -> list[str]:
    """Distinct content words of a query, in order of first appearance."""
    return _distinct_content(words(text))


def keyword_words(text: str, query: bool = False) -> list[str]:
    """The words of ``text``'s `keyword_text`, in order (marks kept in their words): what
    the index holds of a stored text, or (``query``) what a query looks up."""
    return [w.lower() for w in _keyword_word().findall(keyword_text(text, query))]


def keyword_terms(text: str) -> list[str]:
    """The words a keyword index is searched with: the distinct content words of the
    query's `keyword_words`, as `query_terms` keeps them."""
    return _distinct_content(keyword_words(text, query=True))


def fts5_match(terms: list[str]) -> str:
    """An FTS5 MATCH expression: any of the terms, each quoted so no syntax leaks in."""
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
