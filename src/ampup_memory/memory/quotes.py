"""A batch's quote check made fast: many quotes asking one long cited unit.

The rule itself is `facts.quote_found` (verbatim in a cited unit); :class:`CitedTexts`
answers exactly as ``quote in text`` does, sampling a unit once it has been asked often.
Its own module so that numpy loads only where a batch of facts is checked.
"""

from __future__ import annotations

import numpy as np

# A batch may hold 1,000 facts citing up to 32 units of 1 MB each: a scan of the unit per
# quote cost up to 1,000 x 32 MB (4.1 s of CPU for 1,000-character quotes in the last unit).
# A unit asked often is sampled instead: its windows of w characters at every w-th
# position, hashed. A quote at least 2w - 1 long that occurs at p holds the window starting
# at the first multiple j of w from p, as its own characters from o = j - p < w; so looking
# up the quote's first w windows finds every place it may start, and each is checked with
# startswith (a hash collision costs a check, never an answer). w is 16, or 8 for quotes of
# 15 to 30 characters. Shorter quotes, short units, units asked a few times and repetitive
# text (too many places to check) are scanned.
SAMPLES = (16, 8)  # window widths, widest first
SAMPLED_FROM = 64 * 1024  # characters: below, a scan costs less than a look-up
SCANS_BEFORE_SAMPLING = 32  # sampling a unit costs about as much as this many scans
MAX_CANDIDATES = 64
_WINDOWS = {w: np.arange(w)[:, None] + np.arange(w) for w in SAMPLES}  # row o: window at o
_POWERS = {w: np.array([pow(0x100000001B3, i, 2**64) for i in range(w)], dtype=np.uint64)
           for w in SAMPLES}


def _window_hashes(windows: np.ndarray) -> np.ndarray:
    """One number per row of code points (uint64 arithmetic wraps, as wanted)."""
    powers = _POWERS[windows.shape[1]]
    hashes: np.ndarray = (windows.astype(np.uint64) * powers).sum(axis=1, dtype=np.uint64)
    return hashes


def _code_points(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


class CitedTexts:
    """The cited units' texts of one batch, each sampled once it has been scanned often."""

    def __init__(self) -> None:
        # keyed by the text (a str keeps its hash) and the window width
        self._scans: dict[tuple[str, int], int] = {}
        self._samples: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}
        self._quote: tuple[str, int, np.ndarray] | None = None  # a fact's cites ask one

    def holds(self, text: str, quote: str) -> bool:
        """``quote in text``."""
        width = next((w for w in SAMPLES if len(quote) >= 2 * w - 1), None)
        if width is None or len(text) < SAMPLED_FROM:
            return quote in text
        key = (text, width)
        sampled = self._samples.get(key)
        if sampled is None:
            scans = self._scans[key] = self._scans.get(key, 0) + 1
            if scans <= SCANS_BEFORE_SAMPLING:
                return quote in text
            sampled = self._samples[key] = _sample(text, width)
        hashes, starts = sampled
        if self._quote is None or self._quote[:2] != (quote, width):
            head = _code_points(quote[:2 * width - 1])
            self._quote = quote, width, _window_hashes(head[_WINDOWS[width]])
        wanted = self._quote[2]
        lo = hashes.searchsorted(wanted)
        hit = hashes[np.minimum(lo, len(hashes) - 1)] == wanted
        if not hit.any():
            return False
        hi = hashes.searchsorted(wanted, "right")
        if int((hi - lo)[hit].sum()) > MAX_CANDIDATES:
            return quote in text
        for o in np.flatnonzero(hit).tolist():
            for j in starts[lo[o]:hi[o]].tolist():
                if j >= o and text.startswith(quote, j - o):
                    return True
        return False


def _sample(text: str, width: int) -> tuple[np.ndarray, np.ndarray]:
    """The hashes of ``text``'s windows of ``width`` characters at every ``width``-th
    position, sorted, and the start of each."""
    points = _code_points(text)
    rows = len(points) // width
    hashes = _window_hashes(points[:rows * width].reshape(rows, width))
    order = np.argsort(hashes)
    return hashes[order], order.astype(np.int64) * width
