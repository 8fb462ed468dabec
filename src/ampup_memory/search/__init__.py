"""Tokenising, embedding and ranking shared by every search."""
