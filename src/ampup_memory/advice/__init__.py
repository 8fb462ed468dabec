"""The advice loop: runs, sessions, judging, situations, notes, the evidence gate and
procedures. See docs/advice.md."""
