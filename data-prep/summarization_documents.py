#!/usr/bin/env python3
"""Example-level helpers for data-prep/prepare-summarization.sh.

Subcommands (all errors are ONE line on stderr and exit status 2, never a traceback):

  identity      find the input files of a corpus (aclsum | source-target | jsonl), check they
                exist, and print a JSON description (path + content sha256) for the manifest
  state         compare an output folder's prepare.json with the requested options
  fetch-aclsum  obtain the pinned aclsum wheel (pip download, cached), verify its sha256 and
                unpack aclsum/dataset/ from it; prints the dataset folder
  convert       read (document, summary) pairs, normalise the text and write
                RAW/{train,valid,test}.source, .target (one example per line) and .ids
  spm-files     write spm.vocab from a sentencepiece model (for a reused --spm-model) and the
                fairseq dictionary (every piece except <unk> and control pieces, with its count)
  finish        length statistics (stats.json + printed table) and prepare.json, written last

Text normalisation (the same for every corpus, documents and summaries): all whitespace runs
(newlines included) become one space, control characters are dropped, and the text is
normalised with sentencepiece's own ``nmt_nfkc`` rule (NFKC: ligatures such as "ﬁ" -> "fi",
full-width forms, zero-width characters removed), so that sentencepiece-decoded model output is
comparable to raw/*.target character for character. Nothing is truncated: documents are kept
whole whatever their length.

Readers
  aclsum         DATASET/{train,val,test}.jsonl give the package's split (only the "id" of each
                 row is used); DATASET/paper_jsons/ID.json (S2ORC) gives the example: document =
                 the paragraphs of pdf_parse.body_text joined with spaces (no section headings,
                 back matter, figure/table captions or bibliography), summary = "abstract".
  source-target  INPUT/{train,valid,test}.source and .target, line-aligned (valid may be named
                 val); line N of .source is the document of line N of .target. Files are UTF-8;
                 lines end with \\n (a \\r before it is dropped).
  jsonl          INPUT/{train,valid,test}.jsonl (valid may be val.jsonl), or one .jsonl file that
                 is split by hash: bucket = int(md5(normalised document)[:8], 16) % 100; < 5 ->
                 test, < 10 -> valid, else train (identical documents share a split; an empty
                 split is filled as in lm_documents.py). Each non-blank line is a JSON object;
                 --document-field / --summary-field are dotted paths (a.b.0 indexes a list); a
                 list of strings is joined with spaces; null counts as empty.
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import unicodedata
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lm_documents as lmd  # noqa: E402  (split rule shared with the LM pipeline)

SPLITS = lmd.SPLITS
PROG = "prepare-summarization.sh"
# bump when the output changes for the same input and options
FORMAT_VERSION = 1
# sources longer than these many fairseq positions (sentencepiece pieces + the </s> that
# fairseq-preprocess appends) are counted in the statistics
LENGTH_LIMITS = (1024, 4096, 16384)

ACLSUM_SPEC = "aclsum==0.1.2"
ACLSUM_WHEEL = "aclsum-0.1.2-py3-none-any.whl"
ACLSUM_SHA256 = "c75ffc48d3eabc5f37c68ea087943780a85950087957759e89746f21111f2213"
ACLSUM_UNPACKED = "aclsum-0.1.2"
ACLSUM_SPLIT_FILES = {"train": "train.jsonl", "valid": "val.jsonl", "test": "test.jsonl"}


# A user-facing error: printed as one line, exit status 2. The LM pipeline's class, so that the
# checks shared with it (lmd.check_prepared) raise what main() catches.
PrepError = lmd.PrepError


# ----------------------------------------------------------------------------- text

_CONTROLS = {c: None for c in [*range(0x20), *range(0x7F, 0xA0)]}
try:
    import sentencepiece as _spm

    _NORMALIZER = _spm.SentencePieceNormalizer(rule_name="nmt_nfkc", add_dummy_prefix=False,
                                               escape_whitespaces=False, remove_extra_whitespaces=True)
    _nfkc = _NORMALIZER.normalize
except (ImportError, AttributeError, TypeError):  # sentencepiece < 0.2: plain NFKC
    def _nfkc(text):
        return unicodedata.normalize("NFKC", text)


def normalize_text(text):
    """One line of text: whitespace runs -> one space, control characters dropped, nmt_nfkc."""
    text = " ".join(text.split()).translate(_CONTROLS)
    return " ".join(_nfkc(text).split())


# ----------------------------------------------------------------------------- input discovery


def _split_file(folder, split, suffix, alternatives=("val",)):
    """Path of folder/{split}{suffix}; valid may also be val (not both)."""
    names = [split] + (list(alternatives) if split == "valid" else [])
    found = [os.path.join(folder, n + suffix) for n in names if os.path.isfile(os.path.join(folder, n + suffix))]
    if len(found) > 1:
        raise PrepError(f"both {found[0]} and {found[1]} exist; keep one of them")
    return found[0] if found else None


def source_target_files(folder):
    """{split: (source path, target path)}; every file must exist."""
    files, missing = {}, []
    for split in SPLITS:
        pair = []
        for side in ("source", "target"):
            p = _split_file(folder, split, f".{side}")
            if p is None:
                missing.append(f"{split}.{side}" + (f" (or val.{side})" if split == "valid" else ""))
            pair.append(p)
        files[split] = tuple(pair)
    if missing:
        raise PrepError(f"{folder} lacks {', '.join(missing)} (the layout is train/valid/test .source + .target)")
    return files


def jsonl_files(path):
    """{split: path} for a folder of split files, or {None: path} for one file to split by hash."""
    if os.path.isfile(path):
        return {None: path}
    files, missing = {}, []
    for split in SPLITS:
        p = _split_file(path, split, ".jsonl")
        if p is None:
            missing.append(f"{split}.jsonl" + (" (or val.jsonl)" if split == "valid" else ""))
        files[split] = p
    if missing:
        raise PrepError(f"{path} lacks {', '.join(missing)} (give a folder with train/valid/test .jsonl or one .jsonl file)")
    return files


def aclsum_dataset_dir(folder):
    """The dataset/ folder of an unpacked aclsum wheel under folder, or None."""
    for cand in (os.path.join(folder, ACLSUM_UNPACKED, "aclsum", "dataset"), os.path.join(folder, "aclsum", "dataset")):
        if os.path.isdir(cand):
            return cand
    return None


def check_aclsum_dataset(dataset):
    for split, name in ACLSUM_SPLIT_FILES.items():
        if not os.path.isfile(os.path.join(dataset, name)):
            raise PrepError(f"{dataset} lacks {name} (not an aclsum dataset folder)")
    if not os.path.isdir(os.path.join(dataset, "paper_jsons")):
        raise PrepError(f"{dataset} lacks paper_jsons/ (not an aclsum dataset folder)")


def sha256_files(paths, root=None):
    """sha256 over (relative name, content) of the given files, in the given order."""
    h = hashlib.sha256()
    for p in paths:
        name = os.path.relpath(p, root) if root else os.path.basename(p)
        h.update(name.encode("utf-8", "surrogateescape") + b"\0")
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        h.update(b"\0")
    return f"{len(paths)} files, sha256:{h.hexdigest()[:16]}"


def identity(args):
    """The input identity recorded in (and compared against) prepare.json."""
    inp = args.input
    if args.corpus == "aclsum":
        if not inp:
            ident = {"input": f"PyPI {ACLSUM_SPEC}", "sources": {ACLSUM_WHEEL: f"sha256:{ACLSUM_SHA256}"}}
        elif os.path.isfile(os.path.join(inp, ACLSUM_WHEEL)):
            ident = {"input": os.path.realpath(inp), "sources": {ACLSUM_WHEEL: f"sha256:{ACLSUM_SHA256}"}}
        else:
            dataset = aclsum_dataset_dir(inp)
            if dataset is None:
                raise PrepError(f"--input {inp} holds neither {ACLSUM_WHEEL} nor {ACLSUM_UNPACKED}/aclsum/dataset/ "
                                f"(or aclsum/dataset/); see --help")
            check_aclsum_dataset(dataset)
            paths = []
            for root, dirs, files in os.walk(dataset):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                paths += [os.path.join(root, f) for f in sorted(files) if not f.startswith(".")]
            ident = {"input": os.path.realpath(inp), "dataset": dataset,
                     "sources": {"unpacked": sha256_files(paths, dataset)}}
    elif args.corpus == "source-target":
        files = source_target_files(inp)
        flat = [p for s in SPLITS for p in files[s]]
        ident = {"input": os.path.realpath(inp), "sources": {"files": sha256_files(flat)}}
    else:
        files = jsonl_files(inp)
        ident = {"input": os.path.realpath(inp), "sources": {"files": sha256_files(list(files.values()))}}
    print(json.dumps(ident, sort_keys=True))


# ----------------------------------------------------------------------------- aclsum fetch


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch_aclsum(args):
    """Print the dataset folder of the pinned aclsum wheel, downloading/unpacking as needed."""
    dl = os.path.join(args.out, "download")
    if args.input and not os.path.isfile(os.path.join(args.input, ACLSUM_WHEEL)):
        dataset = aclsum_dataset_dir(args.input)  # unpacked folder supplied by the user, used as is
        check_aclsum_dataset(dataset)
        print(dataset)
        return
    os.makedirs(dl, exist_ok=True)
    if args.input:
        wheel = os.path.join(args.input, ACLSUM_WHEEL)
        if _sha256(wheel) != ACLSUM_SHA256:
            raise PrepError(f"{wheel} does not match the pinned sha256 {ACLSUM_SHA256} (not the {ACLSUM_SPEC} release)")
    else:
        wheel = os.path.join(dl, ACLSUM_WHEEL)
        if os.path.isfile(wheel):
            if _sha256(wheel) != ACLSUM_SHA256:
                raise PrepError(f"cached {wheel} does not match the pinned sha256; delete it and re-run")
        else:
            tmp = os.path.join(dl, ".pip-tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            log = os.path.join(dl, "pip.log")
            # --python-version: the wheel declares Requires-Python >= 3.11, which only matters to
            # `pip install`; the data files are read here without importing the package
            cmd = [args.python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                   "--python-version", "3.11", "--disable-pip-version-check", "-d", tmp, ACLSUM_SPEC]
            with open(log, "w") as f:
                rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode
            got = os.path.join(tmp, ACLSUM_WHEEL)
            if rc != 0 or not os.path.isfile(got):
                shutil.rmtree(tmp, ignore_errors=True)
                raise PrepError(f"pip download {ACLSUM_SPEC} failed (no network to PyPI?); see {log}, "
                                f"or pass --input DIR holding {ACLSUM_WHEEL}")
            if _sha256(got) != ACLSUM_SHA256:
                shutil.rmtree(tmp, ignore_errors=True)
                raise PrepError(f"pip download {ACLSUM_SPEC} gave a file whose sha256 is not the pinned {ACLSUM_SHA256}")
            os.replace(got, wheel)
            shutil.rmtree(tmp, ignore_errors=True)
    unpacked = os.path.join(dl, ACLSUM_UNPACKED)
    stamp = os.path.join(unpacked, ".sha256")
    dataset = os.path.join(unpacked, "aclsum", "dataset")
    if not os.path.isdir(dataset) or not os.path.isfile(stamp) or open(stamp).read().strip() != ACLSUM_SHA256:
        shutil.rmtree(unpacked, ignore_errors=True)
        try:
            with zipfile.ZipFile(wheel) as z:
                members = [m for m in z.namelist() if m.startswith("aclsum/dataset/") and not m.endswith("/")
                           and not os.path.basename(m).startswith(".")]
                z.extractall(unpacked, members)
        except zipfile.BadZipFile:
            raise PrepError(f"could not unpack {wheel}")
        with open(stamp, "w") as f:
            f.write(ACLSUM_SHA256 + "\n")
    check_aclsum_dataset(dataset)
    print(dataset)


# ----------------------------------------------------------------------------- readers
# each yields (split or None, id, document, summary, where) with the text NOT yet normalised;
# ``where`` names the file (and line) for error messages: (document place, summary place)


def _read_lines(path):
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise PrepError(f"{path}:{line}: not valid UTF-8")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the final newline
    return [l[:-1] if l.endswith("\r") else l for l in lines]


def read_source_target(folder):
    for split, (src, tgt) in source_target_files(folder).items():
        docs, sums = _read_lines(src), _read_lines(tgt)
        if len(docs) != len(sums):
            raise PrepError(f"{src} has {len(docs)} lines but {tgt} has {len(sums)}; "
                            f"they must be line-aligned (one example per line)")
        name = os.path.basename(src)
        for i, (d, s) in enumerate(zip(docs, sums), 1):
            yield split, f"{name}:{i}", d, s, (f"{src}:{i}", f"{tgt}:{i}")


def get_field(obj, path):
    """Value at a dotted path (a.b.0 indexes a list); KeyError if absent. A key that contains
    dots is found when it is the whole path."""
    if isinstance(obj, dict) and path in obj:
        return obj[path]
    cur = obj
    for part in path.split("."):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and re.fullmatch(r"\d+", part) and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            raise KeyError(path)
    return cur


def field_text(value, field, where):
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return " ".join(value)
    kind = ("boolean" if isinstance(value, bool) else "number" if isinstance(value, (int, float))
            else "object" if isinstance(value, dict) else "list of non-strings")
    raise PrepError(f"{where}: field '{field}' is a {kind}, not text or a list of strings")


def read_jsonl(path, doc_field, sum_field):
    for split, fpath in jsonl_files(path).items():
        name = os.path.basename(fpath)
        for i, line in enumerate(_read_lines(fpath), 1):
            if not line.strip():
                continue
            where = f"{fpath}:{i}"
            try:
                obj = json.loads(line)
            except ValueError as e:
                raise PrepError(f"{where}: invalid JSON ({str(e).split(':')[0]})")
            if not isinstance(obj, dict):
                raise PrepError(f"{where}: a JSON object is expected, found {type(obj).__name__}")
            texts = []
            for field in (doc_field, sum_field):
                try:
                    texts.append(field_text(get_field(obj, field), field, where))
                except KeyError:
                    raise PrepError(f"{where}: no field '{field}' (set --document-field / --summary-field)")
            ex_id = obj.get("id")
            ex_id = str(ex_id) if isinstance(ex_id, (str, int)) and str(ex_id).strip() else f"{name}:{i}"
            yield split, ex_id, texts[0], texts[1], (f"{where} ('{doc_field}')", f"{where} ('{sum_field}')")


def read_aclsum(dataset):
    for split, name in ACLSUM_SPLIT_FILES.items():
        listing = os.path.join(dataset, name)
        for i, line in enumerate(_read_lines(listing), 1):
            if not line.strip():
                continue
            try:
                paper_id = json.loads(line)["id"]
            except (ValueError, KeyError, TypeError):
                raise PrepError(f"{listing}:{i}: not a JSON object with an \"id\"")
            paper = os.path.join(dataset, "paper_jsons", f"{paper_id}.json")
            if not os.path.isfile(paper):
                raise PrepError(f"{listing}:{i}: paper {paper_id} has no {paper}")
            try:
                with open(paper, encoding="utf-8") as f:
                    d = json.load(f)
                body = [p["text"] for p in d["pdf_parse"]["body_text"]]
                abstract = d["abstract"]
            except (ValueError, KeyError, TypeError):
                raise PrepError(f"{paper}: not an S2ORC paper (needs \"abstract\" and pdf_parse.body_text[].text)")
            yield split, paper_id, " ".join(body), abstract or "", (f"{paper} (body_text)", f"{paper} (abstract)")


# ----------------------------------------------------------------------------- convert


def convert(args):
    if args.corpus == "aclsum":
        examples = read_aclsum(args.input)
    elif args.corpus == "source-target":
        examples = read_source_target(args.input)
    else:
        examples = read_jsonl(args.input, args.document_field, args.summary_field)

    kept = {s: [] for s in SPLITS}
    unsplit = []
    dropped = []
    for split, ex_id, doc, summ, (doc_where, sum_where) in examples:
        doc, summ = normalize_text(doc), normalize_text(summ)
        for text, where, what in ((doc, doc_where, "document"), (summ, sum_where, "summary")):
            if not text:
                if not args.drop_empty:
                    raise PrepError(f"{where}: empty {what} (pass --drop-empty to drop such examples)")
                dropped.append(where)
                break
        else:
            (kept[split] if split else unsplit).append((ex_id, doc, summ))
    rule = "given"
    if unsplit:
        rule = "md5(document)"
        try:
            assignment = lmd.assign_splits(sorted({doc for _, doc, _ in unsplit}))
        except lmd.PrepError as e:
            raise PrepError(str(e).replace("documents", "examples"))
        for ex in unsplit:
            kept[assignment[ex[1]]].append(ex)
    for split in SPLITS:
        if not kept[split]:
            raise PrepError(f"the {split} split has no examples" + (" after --drop-empty" if dropped else ""))

    os.makedirs(args.out, exist_ok=True)
    for split in SPLITS:
        for ext, col in (("ids", 0), ("source", 1), ("target", 2)):
            with open(os.path.join(args.out, f"{split}.{ext}"), "w", encoding="utf-8", newline="\n") as f:
                for ex in kept[split]:
                    f.write(ex[col].replace("\n", " ") + "\n")
    if dropped:
        shown = ", ".join(dropped[:3]) + (" ..." if len(dropped) > 3 else "")
        print(f"{PROG}: note: --drop-empty dropped {len(dropped)} example(s) with an empty document or summary: {shown}",
              file=sys.stderr)
    counts = ", ".join(f"{s} {len(kept[s])}" for s in SPLITS)
    print(f"examples ({rule} split): {counts}" + (f"; {len(dropped)} empty dropped" if dropped else ""))


# ----------------------------------------------------------------------------- spm / dictionary


def spm_files(args):
    import sentencepiece as spm

    try:
        sp = spm.SentencePieceProcessor(model_file=args.model)
    except (OSError, RuntimeError):
        raise PrepError(f"{args.model} is not a sentencepiece model")
    if args.vocab_out:
        with open(args.vocab_out, "w", encoding="utf-8", newline="\n") as f:
            for i in range(sp.get_piece_size()):
                f.write(f"{sp.id_to_piece(i)}\t{sp.get_score(i):g}\n")
    counts = {}
    for path in args.counts:
        with open(path, encoding="utf-8") as f:
            for tok in f.read().split():
                counts[tok] = counts.get(tok, 0) + 1
    with open(args.dict_out, "w", encoding="utf-8", newline="\n") as f:
        for i in range(sp.get_piece_size()):
            # fairseq's Dictionary has its own <s> <pad> </s> <unk>; control pieces never occur in encodings
            if sp.is_unknown(i) or sp.is_control(i):
                continue
            piece = sp.id_to_piece(i)
            if not piece or any(c.isspace() for c in piece):
                raise PrepError(f"sentencepiece piece {piece!r} cannot be written to a fairseq dictionary")
            f.write(f"{piece} {counts.get(piece, 0)}\n")


def check_spm_model(args):
    """Exit 2 with one line unless args.model is a loadable sentencepiece model."""
    if not os.path.isfile(args.model):
        raise PrepError(f"--spm-model {args.model} does not exist")
    import sentencepiece as spm

    try:
        spm.SentencePieceProcessor(model_file=args.model)
    except (OSError, RuntimeError):
        raise PrepError(f"--spm-model {args.model} is not a sentencepiece model")
    print(f"sha256:{_sha256(args.model)}")


# ----------------------------------------------------------------------------- manifest / state


def requested_options(args):
    ident = json.loads(args.identity)
    return {
        "corpus": args.corpus,
        "input": ident["input"],
        "sources": ident["sources"],
        "vocab_size": None if args.spm_model else args.vocab_size,
        "spm_model": {"path": os.path.realpath(args.spm_model), "sha256": args.spm_sha256} if args.spm_model else None,
        "document_field": args.document_field if args.corpus == "jsonl" else None,
        "summary_field": args.summary_field if args.corpus == "jsonl" else None,
        "drop_empty": bool(args.drop_empty),
        "format_version": FORMAT_VERSION,
    }


def expected_outputs():
    files = ["spm/spm.model", "spm/spm.vocab", "spm/dict.txt", "bin/dict.source.txt", "bin/dict.target.txt", "stats.json"]
    for s in SPLITS:
        files += [f"raw/{s}.ids"]
        for side in ("source", "target"):
            files += [f"raw/{s}.{side}", f"tok/{s}.{side}"]
            files += [f"bin/{s}.source-target.{side}.{ext}" for ext in ("bin", "idx")]
    return files


def state(args):
    """Exit 0: build; exit 3: up to date (message on stdout); exit 2: refuse (one line on stderr)."""
    want = requested_options(args)
    return lmd.check_prepared(
        args.out, args.force, want,
        ("corpus", "input", "vocab_size", "spm_model", "document_field", "summary_field", "drop_empty",
         "format_version", "sources"),
        expected_outputs(), f"corpus {want['corpus']}")


# ----------------------------------------------------------------------------- statistics


def summarize(values):
    """min, median, mean, p90 (linear interpolation, numpy's default), max of a list of ints."""
    import numpy as np

    a = np.asarray(values, dtype=np.float64)
    return {"min": int(a.min()), "median": float(np.median(a)), "mean": float(a.mean()),
            "p90": float(np.percentile(a, 90)), "max": int(a.max())}


def length_stats(out):
    stats = {}
    for split in SPLITS:
        entry = {}
        for side in ("source", "target"):
            with open(os.path.join(out, "raw", f"{split}.{side}"), encoding="utf-8") as f:
                words = [len(l.split()) for l in f.read().split("\n")[:-1]]
            with open(os.path.join(out, "tok", f"{split}.{side}"), encoding="utf-8") as f:
                toks = [len(l.split()) for l in f.read().split("\n")[:-1]]
            if len(words) != len(toks):
                raise PrepError(f"raw/{split}.{side} and tok/{split}.{side} differ in line count")
            entry[side] = {"spm_tokens": summarize(toks), "words": summarize(words), "spm_tokens_total": sum(toks)}
            if side == "source":
                # fairseq-preprocess appends </s>: a source needs tokens + 1 positions
                entry["sources_longer_than"] = {str(n): sum(1 for t in toks if t + 1 > n) for n in LENGTH_LIMITS}
        entry["examples"] = len(toks)
        stats[split] = entry
    return stats


def _fmt(v):
    return f"{v:,.1f}" if isinstance(v, float) and v != int(v) else f"{int(v):,}"


def finish(args):
    out = args.out
    stats = length_stats(out)
    timings = {}
    for t in args.timing:
        k, _, v = t.partition("=")
        timings[k] = float(v)
    doc = {
        "splits": stats,
        "definitions": {
            "spm_tokens": "sentencepiece pieces per example (fairseq adds one </s>)",
            "words": "whitespace-separated words of raw/*.source|target",
            "p90": "90th percentile, linear interpolation (numpy.percentile default)",
            "sources_longer_than": "sources with spm_tokens + 1 (</s>) > N, i.e. longer than --max-source-positions N",
        },
    }
    with open(os.path.join(out, "stats.json.tmp"), "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(os.path.join(out, "stats.json.tmp"), os.path.join(out, "stats.json"))
    manifest = {
        "options": requested_options(args),
        "workers": args.workers,
        "packages": json.loads(args.packages) if args.packages else {},
        "tools": json.loads(args.tools) if args.tools else {},
        "examples": {s: stats[s]["examples"] for s in SPLITS},
        "stage_seconds": timings,
        "fairseq_data": os.path.join(os.path.realpath(out), "bin"),
    }
    tmp = os.path.join(out, "prepare.json.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, os.path.join(out, "prepare.json"))

    print()
    print(f"{'split':<6} {'side':<7} {'unit':<7} {'examples':>8} {'min':>7} {'median':>9} {'mean':>9} {'p90':>9} {'max':>8}")
    for s in SPLITS:
        for side in ("source", "target"):
            for unit, key in (("tokens", "spm_tokens"), ("words", "words")):
                v = stats[s][side][key]
                print(f"{s:<6} {side:<7} {unit:<7} {stats[s]['examples']:>8,} {_fmt(v['min']):>7} {_fmt(v['median']):>9} "
                      f"{_fmt(v['mean']):>9} {_fmt(v['p90']):>9} {_fmt(v['max']):>8}")
    limits = "  ".join(f"{'> ' + str(n):>8}" for n in LENGTH_LIMITS)
    print(f"\nsources longer than N positions (tokens + </s>):\n{'split':<6} {'examples':>8}  {limits}")
    for s in SPLITS:
        cells = "  ".join(f"{stats[s]['sources_longer_than'][str(n)]:>8,}" for n in LENGTH_LIMITS)
        print(f"{s:<6} {stats[s]['examples']:>8,}  {cells}")
    print(f"tokens = sentencepiece pieces; statistics in {os.path.join(out, 'stats.json')}")
    print(f"fairseq-train data: {manifest['fairseq_data']} (--task translation --source-lang source --target-lang target)")


# ----------------------------------------------------------------------------- main


def main(argv=None):
    p = argparse.ArgumentParser(prog="summarization_documents.py", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    corpora = ["aclsum", "source-target", "jsonl"]

    def add_fields(q):
        q.add_argument("--document-field", default="document", help="JSONL: dotted path of the document")
        q.add_argument("--summary-field", default="summary", help="JSONL: dotted path of the summary")

    def add_options(q):
        q.add_argument("--out", required=True)
        q.add_argument("--corpus", choices=corpora, required=True)
        q.add_argument("--vocab-size", type=int, required=True)
        q.add_argument("--spm-model", default="", help="reused sentencepiece model (empty: trained)")
        q.add_argument("--spm-sha256", default="", help="printed by check-spm")
        q.add_argument("--drop-empty", action="store_true")
        q.add_argument("--identity", required=True, help="JSON printed by `identity`")
        add_fields(q)

    i = sub.add_parser("identity")
    i.add_argument("--corpus", choices=corpora, required=True)
    i.add_argument("--input", default="")

    s = sub.add_parser("state")
    add_options(s)
    s.add_argument("--force", action="store_true")

    fa = sub.add_parser("fetch-aclsum")
    fa.add_argument("--out", required=True)
    fa.add_argument("--input", default="")
    fa.add_argument("--python", default=sys.executable, help="the Python whose pip downloads the wheel")

    c = sub.add_parser("convert")
    c.add_argument("--corpus", choices=corpora, required=True)
    c.add_argument("--input", required=True, help="corpus folder/file (aclsum: the dataset/ folder)")
    c.add_argument("--out", required=True)
    c.add_argument("--drop-empty", action="store_true")
    add_fields(c)

    cs = sub.add_parser("check-spm")
    cs.add_argument("--model", required=True)

    d = sub.add_parser("spm-files")
    d.add_argument("--model", required=True)
    d.add_argument("--vocab-out", default="", help="write the model's pieces and scores here")
    d.add_argument("--dict-out", required=True)
    d.add_argument("--counts", nargs="+", required=True, help="encoded files to count pieces in")

    f = sub.add_parser("finish")
    add_options(f)
    f.add_argument("--workers", type=int, default=1)
    f.add_argument("--packages", default="")
    f.add_argument("--tools", default="")
    f.add_argument("--timing", action="append", default=[])

    args = p.parse_args(argv)
    commands = {"identity": identity, "state": state, "fetch-aclsum": fetch_aclsum, "convert": convert,
                "check-spm": check_spm_model, "spm-files": spm_files, "finish": finish}
    try:
        return commands[args.cmd](args) or 0
    except PrepError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"{PROG}: error: {e.strerror or e}: {e.filename or ''}".rstrip(": "), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
