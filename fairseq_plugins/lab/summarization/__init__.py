"""Summarization tools around fairseq-generate (docs/summarization.md): ROUGE/sacreBLEU scoring,
the Lead-k baseline, the facts corpus's scores per fact, decoding lengths from the data, source/target length checks against a
model's limits, and the results tables. ``fairseq-longmem summarize`` and ``fairseq-longmem
results summarization`` (:mod:`fairseq_plugins.lab.summarization.cli`, :mod:`fairseq_plugins.cli.results`)
are their command-line form; every module imports from Python without side effects.
"""
