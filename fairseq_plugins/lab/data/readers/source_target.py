"""Line-aligned ``{train,valid,test}.source`` and ``.target`` (prepare-summarization.sh
--corpus source-target; CNN/DailyMail as in fairseq's BART recipe; valid may be named val):
line N of .source is the document of line N of .target. Files are UTF-8; lines end with \\n
(a \\r before it is dropped)."""
import os

from fairseq_plugins.lab.data.manifest import files_identity
from fairseq_plugins.lab.data.readers import Reader
from fairseq_plugins.lab.data.text import SPLITS, read_lines, split_file
from fairseq_plugins.errors import ConfigError


def files(folder):
    """{split: (source path, target path)}; every file must exist."""
    found, missing = {}, []
    for split in SPLITS:
        pair = []
        for side in ("source", "target"):
            p = split_file(folder, split, f".{side}")
            if p is None:
                missing.append(f"{split}.{side}" + (f" (or val.{side})" if split == "valid" else ""))
            pair.append(p)
        found[split] = tuple(pair)
    if missing:
        raise ConfigError(f"{folder} lacks {', '.join(missing)} (the layout is train/valid/test .source + .target)")
    return found


def identity_files(folder):
    """The input files, in the order their content is hashed for the manifest."""
    pairs = files(folder)
    return [p for s in SPLITS for p in pairs[s]]


def read(folder):
    for split, (src, tgt) in files(folder).items():
        docs, sums = read_lines(src), read_lines(tgt)
        if len(docs) != len(sums):
            raise ConfigError(f"{src} has {len(docs)} lines but {tgt} has {len(sums)}; "
                              f"they must be line-aligned (one example per line)")
        name = os.path.basename(src)
        for i, (d, s) in enumerate(zip(docs, sums), 1):
            yield split, f"{name}:{i}", d, s, (f"{src}:{i}", f"{tgt}:{i}")


READER = Reader(name="source-target", pipeline="summarization", read=read,
                identity=lambda folder: files_identity(folder, identity_files(folder)),
                summary="line-aligned {train,valid,test}.source and .target (CNN/DailyMail as in fairseq's BART recipe)")
