"""Text generation tools around the hub interface (:mod:`fairseq_plugins.models.hub`):
:mod:`fairseq_plugins.lab.generation.continuation`, ``fairseq-longmem continue`` (docs/generation.md)."""
