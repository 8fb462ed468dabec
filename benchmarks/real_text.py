"""A corpus of real English text pieces from files already on this machine, for measuring
the vector graph's recall on real (topic-clustered, Zipfian) text rather than synthetic
generators.

Sources, in this order, each walked in sorted file order (a piece counts for the first
source that yields it; each source yields paragraphs, cut into pieces of 1 to 3
sentences, 40 to 600 characters):

- ``docstrings``: module, class and function docstrings of every ``.py`` file under the
  venv's ``site-packages`` and ``/usr/lib/python3.11`` (``ast``), split on blank lines;
- ``comments``: runs of ``#`` comment lines in the same files, joined per block;
- ``gcloud_docstrings``, ``gcloud_comments``: the same from the Google Cloud SDK's Python
  (``/usr/lib/google-cloud-sdk/lib`` and its ``gsutil``; its bundled Python left out);
- ``man``: the English man pages (``/usr/share/man/man*/*.gz``), roff markup stripped by
  a regular expression (macro lines dropped but for their text arguments, font and
  character escapes removed);
- ``c_comments``: comments of the C and C++ headers and sources under ``/usr/include``
  (``/* */`` blocks with their leading ``*`` removed, runs of ``//`` lines), split on
  blank comment lines;
- ``pod``: the Perl documentation (POD paragraphs of ``.pod`` and ``.pm`` files under
  ``/usr/share/perl*`` and ``/usr/lib/x86_64-linux-gnu/perl*``), formatting codes
  unwrapped;
- ``javadoc``: the comments of the JDK's Java sources (the largest ``lib/src.zip``
  under ``/usr/lib/jvm``), HTML tags and ``{@code ...}`` wrappers removed, block tags
  (``@param name``) dropped;
- ``doc``: plain-text files under ``/usr/share/doc`` (``.txt``, ``.md``, ``.rst``,
  README, NEWS, changelogs; gzipped or not);
- ``rust_docs``: the ``<p>`` paragraphs of the Rust toolchain's HTML documentation
  (``~/.rustup/toolchains/stable-*/share/doc/rust/html``: std, the book, the reference,
  cargo's and rustc's books), tags removed, entities unescaped;
- ``conversations``: the turns of the LongMemEval_S subset (`retrieval_quality.py`) and
  of LoCoMo (`locomo_retrieval.py`), when their wheels are available.

Pieces are deduplicated exactly (after whitespace normalisation), and a piece that is
mostly code or symbols is dropped (see ``prose``). The output is shuffled with a fixed
seed, so any prefix (100k, 300k) is a fair sample (the same files give the same file;
the venv's packages are among the files, so installing one, such as the ``bench``
extra's, changes the corpus: keep the file of a run to compare with it),
and cached as one JSON line per piece
(``{"s": source, "t": text}``). The texts are under their packages' licences: used
locally for measurement, never committed or redistributed.

    python -m benchmarks.real_text --out /tmp/realtext12/pieces.jsonl
"""

from __future__ import annotations

import argparse
import ast
import gzip
import json
import random
import re
import statistics
import sys
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

ROOTS = (Path(sys.prefix) / "lib" / "python3.11" / "site-packages",
         Path("/usr/lib/python3.11"))
GCLOUD = (Path("/usr/lib/google-cloud-sdk/lib"), Path("/usr/lib/google-cloud-sdk/platform/gsutil"))
MAN = Path("/usr/share/man")
INCLUDE = Path("/usr/include")
PERL = (Path("/usr/share"), Path("/usr/lib/x86_64-linux-gnu"))
DOC = Path("/usr/share/doc")
MIN_CHARS, MAX_CHARS = 40, 600
SEED = 12

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'])")
_WORD = re.compile(r"[A-Za-z][a-z]+(?:'[a-z]+)?")
_COMMENT = re.compile(r"^\s*#+ ?(.*)$")
_ROFF_FONT = re.compile(r"\\f(?:\[[^\]]*\]|\(..|.)")
_ROFF_ESC = re.compile(r"\\(?:\(..|\[[^\]]*\]|\*(?:\(..|\[[^\]]*\]|.)|[-e&|^%:0 ~]|s[-+]?\d|.)")


def prose(text: str) -> bool:
    """Mostly English words: at least 6 tokens, 60 % or more of the whitespace-separated
    tokens are words of letters (punctuation at their ends allowed), letters make 65 %
    or more of the characters, nearly all ASCII, and few code signs."""
    tokens = text.split()
    if len(tokens) < 6:
        return False
    words = sum(1 for t in tokens if _WORD.fullmatch(t.strip(".,;:!?()\"'")))
    if words < 0.6 * len(tokens):
        return False
    letters = sum(c.isalpha() for c in text)
    if letters < 0.65 * len(text):
        return False
    if sum(not c.isascii() for c in text) > 0.02 * len(text):
        return False
    if any(sign in text for sign in (" = ", "==", "%r", "%s", "->", "::", "/*")):
        return False
    return sum(text.count(c) for c in "{}[]=<>|\\$@_`*#~") <= 0.01 * len(text)


def pieces(paragraph: str) -> Iterator[str]:
    """A paragraph's pieces: its sentences grouped greedily, 1 to 3 per piece, a piece
    closed once it reaches 60 characters (so most pieces are one sentence); pieces outside
    40..600 characters dropped."""
    text = " ".join(paragraph.split())
    if len(text) < MIN_CHARS:
        return
    group: list[str] = []
    size = 0
    for s in _SENTENCE.split(text):
        group.append(s)
        size += len(s) + 1
        if size >= 60 or len(group) == 3:
            yield " ".join(group)
            group, size = [], 0
    if group:
        yield " ".join(group)


def _paragraphs(text: str) -> Iterator[str]:
    yield from (p for p in re.split(r"\n\s*\n", text) if p.strip())


def python_files(roots: tuple[Path, ...] = ROOTS) -> list[Path]:
    return sorted(p for root in roots for p in root.rglob("*.py") if p.is_file())


def docstrings_and_comments(path: Path) -> tuple[list[str], list[str]]:
    try:
        source = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return [], []
    docs: list[str] = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(source)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                 ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc:
                    docs.extend(_paragraphs(doc))
    except (SyntaxError, ValueError, RecursionError):
        pass
    comments: list[str] = []
    block: list[str] = []
    for line in source.splitlines():
        m = _COMMENT.match(line)
        if m and not line.lstrip().startswith("#!"):
            body = m.group(1).strip()
            if body:
                block.append(body)
                continue
        if block:
            comments.append(" ".join(block))
            block = []
    if block:
        comments.append(" ".join(block))
    return docs, comments


def roff_text(raw: str) -> list[str]:
    """Paragraphs of a man page's roff source: macro lines end a paragraph, the text
    arguments of font and heading macros are kept, escapes removed."""
    paras: list[str] = []
    cur: list[str] = []
    for line in raw.splitlines():
        if line.startswith((".", "'")):
            name, _, arg = line[1:].partition(" ")
            if name in ("B", "I", "BR", "IR", "RB", "RI", "BI", "IB", "SM", "SB") and arg:
                cur.append(arg.replace('"', ""))
                continue
            if cur:
                paras.append(" ".join(cur))
                cur = []
            continue
        line = _ROFF_ESC.sub(lambda m: "-" if m.group(0) == "\\-" else " "
                             if m.group(0) in ("\\ ", "\\~") else "", _ROFF_FONT.sub("", line))
        if line.strip():
            cur.append(line.strip())
        elif cur:
            paras.append(" ".join(cur))
            cur = []
    if cur:
        paras.append(" ".join(cur))
    return paras


def man_pages() -> Iterator[str]:
    for path in sorted(MAN.glob("man*/*.gz")):
        try:
            raw = gzip.decompress(path.read_bytes()).decode("utf-8", errors="replace")
        except (OSError, EOFError):
            continue
        yield from roff_text(raw)


_C_BLOCK = re.compile(r"/\*+(.*?)\*/", re.S)
_C_LINE = re.compile(r"^\s*//+!?<? ?(.*)$")
_POD_CODE = re.compile(r"[A-Z]<+\s*([^<>]*?)\s*>+")


def c_comments() -> Iterator[str]:
    suffixes = {".h", ".hh", ".hpp", ".c", ".cc", ".cpp", ".def", ".inc"}
    for path in sorted(p for p in INCLUDE.rglob("*") if p.suffix in suffixes and p.is_file()):
        try:
            source = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for m in _C_BLOCK.finditer(source):
            lines = [re.sub(r"^\s*\*+ ?", "", ln) for ln in m.group(1).splitlines()]
            yield from _paragraphs("\n".join(lines))
        block: list[str] = []
        for line in source.splitlines():
            lm = _C_LINE.match(line)
            if lm and lm.group(1).strip():
                block.append(lm.group(1).strip())
                continue
            if block:
                yield " ".join(block)
                block = []
        if block:
            yield " ".join(block)


def pod_paragraphs() -> Iterator[str]:
    files = sorted(p for root in PERL for d in sorted(root.glob("perl*")) if d.is_dir()
                   for p in d.rglob("*") if p.suffix in (".pod", ".pm") and p.is_file())
    for path in files:
        try:
            source = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        inside = False
        for para in re.split(r"\n\s*\n", source):
            head = para.lstrip()
            if head.startswith("=cut"):
                inside = False
                continue
            if head.startswith("="):
                inside = True
                continue
            if inside and not para.startswith((" ", "\t")):  # indented: verbatim code
                text = para
                for _ in range(3):  # nested codes, innermost first
                    text = _POD_CODE.sub(lambda m: m.group(1), text)
                yield text


_HTML_TAG = re.compile(r"</?[a-zA-Z][^>]*>")
_JAVADOC_INLINE = re.compile(r"\{@\w+\s+([^{}]*)\}")
_JAVADOC_TAG = re.compile(r"^@(param|throws|exception)\s+\S+\s*|^@\w+\s*")


def jdk_sources() -> Path | None:
    found = sorted(Path("/usr/lib/jvm").glob("*/lib/src.zip"))
    return max(found, key=lambda p: p.stat().st_size) if found else None


def javadoc() -> Iterator[str]:
    import zipfile

    src = jdk_sources()
    if src is None:
        return
    with zipfile.ZipFile(src) as z:
        for name in sorted(n for n in z.namelist() if n.endswith(".java")):
            source = z.read(name).decode("utf-8", errors="replace")
            for m in _C_BLOCK.finditer(source):
                lines = [_JAVADOC_TAG.sub("", re.sub(r"^\s*\*+ ?", "", ln).strip())
                         for ln in m.group(1).splitlines()]
                text = "\n".join(lines)
                for _ in range(2):
                    text = _JAVADOC_INLINE.sub(lambda g: g.group(1), text)
                text = _HTML_TAG.sub(" ", text).replace("&lt;", "<").replace(
                    "&gt;", ">").replace("&amp;", "&").replace("&nbsp;", " ")
                yield from _paragraphs(text)


_HTML_P = re.compile(r"<p>(.*?)</p>", re.S)


def rust_docs() -> Iterator[str]:
    import html

    for root in sorted(Path.home().glob(".rustup/toolchains/stable-*/share/doc/rust/html")):
        for path in sorted(root.rglob("*.html")):
            try:
                page = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            for m in _HTML_P.finditer(page):
                yield html.unescape(_HTML_TAG.sub("", m.group(1)))


def doc_files() -> Iterator[str]:
    keep = re.compile(r"(\.(txt|md|rst)(\.gz)?$)|(^(README|NEWS|changelog|CHANGES|"
                      r"AUTHORS|TODO|FAQ)[^/]*$)", re.I)
    for path in sorted(p for p in DOC.rglob("*") if p.is_file() and keep.search(p.name)):
        try:
            data = path.read_bytes()
            if path.name.endswith(".gz"):
                data = gzip.decompress(data)
        except (OSError, EOFError):
            continue
        yield from _paragraphs(data.decode("utf-8", errors="replace"))


def conversations(cache: Path) -> Iterator[str]:
    from benchmarks import locomo_retrieval, retrieval_quality

    try:
        _, sessions = retrieval_quality.load(cache)
        for s in sessions:
            turns = s["turns"] if isinstance(s["turns"], list) else ast.literal_eval(
                s["turns"])
            for t in turns:
                yield from _paragraphs(str(t["content"]))
    except Exception as exc:  # noqa: BLE001 - an optional source; say why it is missing
        print(f"LongMemEval skipped: {exc}", file=sys.stderr)
    try:
        data = locomo_retrieval.load(cache)
        for conv in data["conversations"]:
            for doc in conv["docs"]:
                yield from _paragraphs(str(doc["text"]))
    except Exception as exc:  # noqa: BLE001
        print(f"LoCoMo skipped: {exc}", file=sys.stderr)


def build(out: Path, cache: Path) -> dict[str, object]:
    seen: set[str] = set()
    rows: list[tuple[str, str]] = []
    counts: Counter[str] = Counter()
    started = time.perf_counter()

    def take(source: str, paragraphs: Iterator[str] | list[str]) -> None:
        for para in paragraphs:
            for piece in pieces(para):
                if MIN_CHARS <= len(piece) <= MAX_CHARS and piece not in seen \
                        and prose(piece):
                    seen.add(piece)
                    rows.append((source, piece))
                    counts[source] += 1

    for prefix, roots in (("", ROOTS), ("gcloud_", GCLOUD)):
        comments: list[str] = []
        for n, path in enumerate(python_files(roots)):
            docs, notes = docstrings_and_comments(path)
            take(prefix + "docstrings", docs)
            comments.extend(notes)
            if n % 2000 == 0:
                print(f"{n} python files, {len(rows)} pieces,"
                      f" {time.perf_counter() - started:.0f}s", file=sys.stderr, flush=True)
        take(prefix + "comments", comments)
    take("man", man_pages())
    print(f"man: {len(rows)} pieces", file=sys.stderr, flush=True)
    take("c_comments", c_comments())
    print(f"c_comments: {len(rows)} pieces", file=sys.stderr, flush=True)
    take("pod", pod_paragraphs())
    take("javadoc", javadoc())
    print(f"javadoc: {len(rows)} pieces", file=sys.stderr, flush=True)
    take("doc", doc_files())
    take("rust_docs", rust_docs())
    take("conversations", conversations(cache))
    random.Random(SEED).shuffle(rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as fh:
        for source, text in rows:
            fh.write(json.dumps({"s": source, "t": text}) + "\n")
    vocab: Counter[str] = Counter()
    for _, text in rows:
        vocab.update(w.lower() for w in _WORD.findall(text))
    stats: dict[str, object] = {
        "pieces": len(rows), "by_source": dict(counts),
        "median_chars": statistics.median(len(t) for _, t in rows),
        "median_words": statistics.median(len(t.split()) for _, t in rows),
        "vocabulary": len(vocab), "vocabulary_5plus": sum(1 for c in vocab.values() if c >= 5),
        "top_words": [w for w, _ in vocab.most_common(20)],
        "build_s": round(time.perf_counter() - started, 1)}
    out.with_suffix(".stats.json").write_text(json.dumps(stats, indent=2))
    return stats


def load_pieces(path: Path, limit: int | None = None) -> list[str]:
    """The cached corpus' texts in its (shuffled) order, the first ``limit``."""
    texts: list[str] = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if limit is not None and len(texts) >= limit:
                break
            texts.append(json.loads(line)["t"])
    return texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("/tmp/realtext12/pieces.jsonl"))
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "ampup-bench")
    args = parser.parse_args()
    print(json.dumps(build(args.out, args.cache), indent=2))


if __name__ == "__main__":
    main()
