"""Filler text for the facts corpus in tests: the books fixture (tests/fixtures/books_txt), its
books divided over three split files, one paragraph per line (the layout of
data-prep/prepare-lm.sh's raw/{train,valid,test}.txt that ``--corpus facts`` reads)."""
from pathlib import Path

from fairseq_plugins.lab.data.text import read_text

BOOKS = Path(__file__).resolve().parent / "fixtures" / "books_txt"
SPLIT_BOOKS = {"train": ["austen-emma", "bryant-stories", "chesterton-thursday", "melville-moby_dick"],
               "valid": ["shakespeare-caesar", "blake-poems"], "test": ["carroll-alice", "whitman-leaves"]}


def write_filler(folder: Path) -> Path:
    """Writes ``folder``/{train,valid,test}.txt and returns ``folder``."""
    for split, names in SPLIT_BOOKS.items():
        paragraphs = []
        for name in names:
            text = read_text(str(BOOKS / f"{name}.txt"))  # UTF-8, or Latin-1 as prepare-lm.sh reads it
            paragraphs += [" ".join(block.split()) for block in text.split("\n\n") if block.strip()]
        (folder / f"{split}.txt").write_text("\n".join(paragraphs) + "\n", encoding="utf-8")
    return folder
