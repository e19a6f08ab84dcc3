"""fairseq-longmem: long-context attention for fairseq (``--user-dir fairseq_plugins``).

Registers with fairseq the models ``infinite_former_lm``, ``infinite_former_gpt2``,
``fastformer_lm``, ``fastformer`` and ``infinite_former_summarizer`` (and their named
architectures), the task ``streaming_lm`` and the criterion
``infinite_former_kl``. ``python -m fairseq_plugins`` lists their options.

fairseq's ``--user-dir`` auto-imports only ``models/`` and ``tasks/``; the
criterions are imported here. Everything is imported under the single name
``fairseq_plugins`` (never a second dotted path, which would register twice).

Importing the package from Python changes nothing global. Only in a fairseq
command-line process does it install the one-line error printer of
:mod:`fairseq_plugins.cli_errors`.
"""

from fairseq_plugins import cli_errors

if cli_errors.running_fairseq_cli():
    cli_errors.install()

from fairseq_plugins import criterions, models, tasks  # noqa: E402,F401
