"""What a read of a branch sees: a chain of segments, oldest ancestor first.

A branch copies no rows when it is made. Its view is its ancestors' rows up to the commit it
forked from, then its own rows: ``main`` up to seq 10, then ``exp`` after its creation
marker. Every read of the read index takes the segments of its view, so a branch, a commit
of it (``at_commit``), a pin and a snapshot are all read by one code path.
"""

from __future__ import annotations

from dataclasses import dataclass

NO_LIMIT = 2**62


@dataclass(frozen=True)
class Segment:
    """Rows of ``branch`` whose commit seq is in ``(after, upto]``."""

    branch: str
    after: int = 0
    upto: int = NO_LIMIT

    def holds(self, seq: int) -> bool:
        return self.after < seq <= self.upto


Segments = tuple[Segment, ...]


def layers(segs: Segments) -> dict[str, int]:
    """Each branch of the chain → its place in it (0 = the oldest ancestor)."""
    return {s.branch: i for i, s in enumerate(segs)}


def layer_order(layer: int, seq: int) -> int:
    """One number that orders commits along a view's chain: every commit of an ancestor
    segment comes before every commit of a later one, whatever their seqs."""
    return (layer << 40) + seq


def uncovered(segs: Segments, base: Segments) -> Segments:
    """The parts of ``segs`` that ``base`` does not hold: what a side wrote since a merge
    base. Both are chains of one scope; a branch appears at most once in each."""
    covered = {s.branch: s for s in base}
    out: list[Segment] = []
    for s in segs:
        b = covered.get(s.branch)
        if b is None or b.after != s.after:
            out.append(s)
            continue
        if b.upto < s.upto:
            out.append(Segment(s.branch, b.upto, s.upto))
    return tuple(out)
