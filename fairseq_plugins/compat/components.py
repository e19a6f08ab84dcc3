"""The plugin's models, tasks and criterions registered with fairseq, from one list.

Two callers register them: :func:`fairseq_plugins.load_components` (the package's ``__init__``
in a fairseq tool, and the commands that need fairseq's registries) and the option checks
(:mod:`.prechecks`), which run while that ``__init__`` is still importing, before it registers
them, and need ``--arch`` resolved. The list lives in compat, not in the package's ``__init__``:
compat may import the core, and that ``__init__`` imports compat, so the checks importing it
would make the two import each other.
"""


def register() -> None:
    """Import the plugin's models, tasks and criterions, which registers them with fairseq
    (fairseq's ``--user-dir`` imports only ``models/`` and ``tasks/``; once imported, a second
    call changes nothing)."""
    # each subpackage by its dotted name: `from fairseq_plugins import ...` names the package's
    # __init__, which imports compat, as what compat imports (the layers would point both ways)
    import fairseq_plugins.criterions  # noqa: F401
    import fairseq_plugins.models  # noqa: F401
    import fairseq_plugins.tasks  # noqa: F401
