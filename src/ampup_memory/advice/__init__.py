"""The advice loop: runs, sessions, judging (and, later, situations, notes, the gate and
procedures). See docs/advice.md."""
