"""The speed and memory benchmark (``fairseq-longmem bench``; docs/benchmark.md).

One module per measurement, each with ``run(args) -> report.Result`` (its table, JSON payload
and plot) and the functions its worker processes run:

* :mod:`~fairseq_plugins.lab.bench.train` — tokens/s and peak memory against the context, training
  and forward only, every arm (and :mod:`~fairseq_plugins.lab.bench.encoder`, the summarizer's encoder);
* :mod:`~fairseq_plugins.lab.bench.generate` — ms per generated token and memory after long prompts;
* :mod:`~fairseq_plugins.lab.bench.paired` — the ∞-former's memory-on ÷ off speed in lockstep pairs;
* :mod:`~fairseq_plugins.lab.bench.memory` — the long-term memory's cost per segment, part by part.

Shared by them: :mod:`~fairseq_plugins.lab.bench.models` (the arms at the benchmark's sizes and the
measured step), :mod:`~fairseq_plugins.lab.bench.resources` (clock, memory, budget, out-of-memory),
:mod:`~fairseq_plugins.lab.bench.worker` (one fresh process per measurement) and
:mod:`~fairseq_plugins.lab.bench.report` (OUT/VERB.md, .json, .png, written whole or not at all).
``args`` is the namespace of ``fairseq-longmem bench VERB`` (:mod:`fairseq_plugins.lab.bench.cli`).
"""
