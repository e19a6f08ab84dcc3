"""The copy probe: does a summarizer learn to copy a marked value from its document, and from
which part of it (docs/results/copy.md)? :mod:`.probe` trains one rung, :mod:`.table` tabulates
the ladder, :mod:`.cli` is ``fairseq-longmem copy``."""

# where the marked values lie (``--where``): inside the lead span, past it, anywhere
WHERE = ("lead", "far", "any")
