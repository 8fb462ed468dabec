"""Model-backed work (extraction, judging, learning, compiling) calls models through here."""
