"""`python -m ampup_memory …` runs the `ampup-memory` command (as `python -m ampup_memory.cli`)."""

from ampup_memory.cli import main

main()
