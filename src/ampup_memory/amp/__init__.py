"""AMP v0.1: memory cells, their access rules and lifecycle."""
