"""The Python stages of the data-prep pipelines (docs/data-preparation.md).

``data-prep/prepare-lm.sh``, ``prepare-summarization.sh`` and ``make-sorting.sh`` are bash
pipelines that sequence the stages; the stages written in Python are here, run as
``fairseq-longmem prep TOPIC COMMAND`` (:mod:`fairseq_plugins.cli.prep`):

- :mod:`~fairseq_plugins.data_prep.readers`: one reader per corpus format and their registry
- :mod:`~fairseq_plugins.data_prep.text`, :mod:`~fairseq_plugins.data_prep.splits`: the text
  and split rules; :mod:`~fairseq_plugins.data_prep.writers`: raw/ and dict.txt;
  :mod:`~fairseq_plugins.data_prep.manifest`: input identities and the manifest
- :mod:`~fairseq_plugins.data_prep.lm`, :mod:`~fairseq_plugins.data_prep.gpt2_bpe`,
  :mod:`~fairseq_plugins.data_prep.summarization`, :mod:`~fairseq_plugins.data_prep.sorting`,
  :mod:`~fairseq_plugins.data_prep.spm`: the stages of each pipeline
"""
