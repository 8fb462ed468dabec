"""Cell stores behind one protocol (`base.CellStore`)."""
