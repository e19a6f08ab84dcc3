"""Instruments that show where the long-term memory helps and where it reads.

* :mod:`~fairseq_plugins.lab.lm.scoring`: every token of a split scored as ``fairseq-eval-lm``
  scores it, with its position in the split;
* :mod:`~fairseq_plugins.lab.lm.position`: loss by offset from the start of the document
  (``fairseq-longmem analyze position``), with :mod:`~fairseq_plugins.lab.common.bootstrap`
  (intervals over documents) and :mod:`~fairseq_plugins.lab.lm.position_report` (table, plot);
* :mod:`~fairseq_plugins.lab.lm.timeline`: which document tokens the long-term memory holds
  where on its [0, 1] timeline;
* :mod:`~fairseq_plugins.lab.lm.memory_map`: the continuous attention's Gaussians mapped onto
  those tokens (``fairseq-longmem analyze memory-map``).

docs/analysis.md describes the commands and what their outputs hold.
"""
