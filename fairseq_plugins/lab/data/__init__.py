"""The Python stages of the data-prep pipelines (docs/data-preparation.md).

``data-prep/prepare-lm.sh``, ``prepare-summarization.sh`` and ``make-sorting.sh`` are bash
pipelines that sequence the stages; the stages written in Python are here, run as
``fairseq-longmem prep TOPIC COMMAND`` (:mod:`fairseq_plugins.cli.prep`):

- :mod:`~fairseq_plugins.lab.data.readers`: one reader per corpus format and their registry
- :mod:`~fairseq_plugins.lab.data.text`, :mod:`~fairseq_plugins.lab.data.splits`: the text
  and split rules; :mod:`~fairseq_plugins.lab.data.writers`: raw/ and dict.txt;
  :mod:`~fairseq_plugins.lab.data.manifest`: input identities and the manifest
- :mod:`~fairseq_plugins.lab.data.lm`, :mod:`~fairseq_plugins.lab.gpt2.bpe`,
  :mod:`~fairseq_plugins.lab.data.summarization`, :mod:`~fairseq_plugins.lab.sorting.data`,
  :mod:`~fairseq_plugins.lab.data.spm`: the stages of each pipeline
"""
