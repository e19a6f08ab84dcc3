"""``python -m fairseq_plugins.cli``: the same as the ``fairseq-longmem`` command."""
import sys

from fairseq_plugins.cli import entry

sys.exit(entry())
