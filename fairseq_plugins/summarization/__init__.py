"""Summarization tools: scoring, baselines and the facts corpus scorer (docs/summarization.md)."""
