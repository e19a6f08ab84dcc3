"""fairseq-longmem: long-context attention for fairseq (``--user-dir fairseq_plugins``).

Registers with fairseq the models ``infinite_former_lm``, ``infinite_former_gpt2``,
``fastformer_lm``, ``fastformer`` and ``infinite_former_summarizer`` (and their named
architectures), the task ``streaming_lm`` and the criterion
``infinite_former_kl``. ``python -m fairseq_plugins`` lists their options.

fairseq's ``--user-dir`` auto-imports only ``models/`` and ``tasks/``; the
criterions are imported with them by :func:`load_components`, whose list is
:func:`fairseq_plugins.compat.components.register` (compat's option checks call it too).
Everything is imported under the single name ``fairseq_plugins`` (never a second dotted
path, which would register twice).

The layers, from the bottom: the core (:mod:`~fairseq_plugins.modules`,
:mod:`~fairseq_plugins.models`, :mod:`~fairseq_plugins.tasks`, :mod:`~fairseq_plugins.criterions`
and the option and error types), which imports nothing above it; :mod:`fairseq_plugins.compat`,
the workarounds of fairseq's own behaviour; :mod:`fairseq_plugins.lab`, the experiments; and
:mod:`fairseq_plugins.cli`, the ``fairseq-longmem`` command (docs/design/architecture.md).

Importing the package from Python only registers the components. In a fairseq command-line
process that loads it (``--user-dir``) it also installs the workarounds of
:mod:`fairseq_plugins.compat` (:func:`fairseq_plugins.compat.install`, which logs one line naming
each change, the one-line error printer among them) and runs its option checks. In the
``fairseq-longmem`` command it does nothing: the command quiets the libraries and loads the
components a subcommand needs itself (:func:`load_components`), so that the data-prep stages
start without fairseq.
"""

from fairseq_plugins.compat.process import running_fairseq_cli, running_tool


def load_components() -> None:
    """Register the plugin's models, tasks and criterions with fairseq (imports them)."""
    from fairseq_plugins.compat.components import register

    register()


if running_tool() != "longmem":
    if running_fairseq_cli():
        from fairseq_plugins import compat

        compat.install()
    load_components()
