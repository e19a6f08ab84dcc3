"""fairseq-longmem: long-context attention for fairseq (``--user-dir fairseq_plugins``).

Registers with fairseq the models ``infinite_former_lm``, ``infinite_former_gpt2``,
``fastformer_lm``, ``fastformer`` and ``infinite_former_summarizer`` (and their named
architectures), the task ``streaming_lm`` and the criterion
``infinite_former_kl``. ``python -m fairseq_plugins`` lists their options.

fairseq's ``--user-dir`` auto-imports only ``models/`` and ``tasks/``; the
criterions are imported here. Everything is imported under the single name
``fairseq_plugins`` (never a second dotted path, which would register twice).

Importing the package from Python changes nothing global. Only in a fairseq
command-line process does it install the workarounds of :mod:`fairseq_plugins.compat`
(the one-line error printer among them) and run its option checks. In the
``fairseq-longmem`` command it quiets the libraries' import-time messages and leaves
the components to the subcommand (:func:`load_components`).
"""

from fairseq_plugins import compat


def load_components() -> None:
    """Register the plugin's models, tasks and criterions with fairseq (imports them)."""
    from fairseq_plugins import criterions, models, tasks  # noqa: F401


if compat.running_tool() == "longmem":
    # the fairseq-longmem command: quiet library imports; it loads the components a subcommand
    # needs itself (fairseq_plugins.cli.main), so that the data-prep stages start without fairseq
    from fairseq_plugins.report.quiet import quiet_imports

    quiet_imports()
else:
    if compat.running_fairseq_cli():
        compat.install()
    load_components()
