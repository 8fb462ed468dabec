"""The advice loop: runs, sessions, situations, notes, the evidence gate and procedures."""
