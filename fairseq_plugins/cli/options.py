"""``fairseq-longmem options``: the options of every plugin component (``python -m fairseq_plugins``)."""

from typing import List, Optional

from fairseq_plugins.__main__ import main as _listing


def main(argv: List[str], prog: str) -> Optional[int]:
    """Print (or with ``--markdown FILE`` write) the option reference; see :mod:`fairseq_plugins.__main__`."""
    return _listing(argv, prog=prog)
