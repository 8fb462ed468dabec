"""Day-two operations: backup, restore and status."""
