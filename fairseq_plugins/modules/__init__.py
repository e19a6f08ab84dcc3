"""Attention and memory building blocks (one concept per file)."""
