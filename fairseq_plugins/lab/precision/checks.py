"""Mixed-precision checks on a CUDA machine: ``fairseq-longmem precision-check``
(``scripts/gpu-checks.sh``; docs/training-at-scale.md, docs/gpt2.md).

Trains the ``precision`` job's arms (the arms registry: infinite_former_lm on streaming_lm,
fastformer_lm on language_modeling, the fastformer encoder–decoder on translation) and
infinite_former_gpt2 (a tiny random GPT-2, :mod:`fairseq_plugins.lab.gpt2.tiny`, converted with
:mod:`fairseq_plugins.lab.gpt2.convert` and fine-tuned from it with ``--restore-file``; without the
``[hf]`` extra its rows say SKIP) on generated toy data with fairseq-train, in fp32 and with
``--fp16``, ``--memory-efficient-fp16``, ``--amp`` and ``--bf16``, and prints a table: first and
last loss, the fp32 run's last loss, PASS when every logged loss is finite, the run learns
(last < first) and ends within 0.5 bit of fp32. ``dry_run`` prepares everything and prints each
row's fairseq-train command line instead of training.
"""

import json
import math
import os
import random
import shlex
import subprocess
import sys
from typing import Dict, List, Optional, Tuple

from fairseq_plugins.errors import ConfigError
from fairseq_plugins.lab.common.fairseq_tools import PACKAGE_DIR

PRECISIONS = {"fp32": [], "fp16": ["--fp16"], "memory-efficient-fp16": ["--memory-efficient-fp16"],
              "amp": ["--amp"], "bf16": ["--bf16"]}
WORDS = [f"w{i}" for i in range(40)]
BIN = os.path.dirname(sys.executable)


def _lines(rng: random.Random, n: int) -> List[str]:
    """Word progressions (learnable) of 5 to 15 words."""
    return [" ".join(WORDS[(s + 3 * k) % 40] for k in range(rng.randint(5, 15)))
            for s in (rng.randrange(40) for _ in range(n))]


def toy_data(work: str) -> str:
    """Write the toy text (LM lines; source → reversed target for translation) and binarize it
    into ``work/lm`` and ``work/mt`` (kept when already there). Returns the raw folder."""
    rng = random.Random(0)
    raw = os.path.join(work, "raw")
    os.makedirs(raw, exist_ok=True)
    for split, n in (("train", 2000), ("valid", 100)):
        with open(os.path.join(raw, f"{split}.txt"), "w") as f:
            f.write("\n".join(_lines(rng, n)) + "\n")
        src = _lines(rng, n)
        with open(os.path.join(raw, f"{split}.src"), "w") as f:
            f.write("\n".join(src) + "\n")
        with open(os.path.join(raw, f"{split}.tgt"), "w") as f:
            f.write("\n".join(" ".join(reversed(s.split())) for s in src) + "\n")
    for args in (["--only-source", "--trainpref", f"{raw}/train.txt", "--validpref", f"{raw}/valid.txt",
                  "--destdir", f"{work}/lm"],
                 ["-s", "src", "-t", "tgt", "--trainpref", f"{raw}/train", "--validpref", f"{raw}/valid",
                  "--destdir", f"{work}/mt", "--joined-dictionary"]):
        destdir = args[args.index("--destdir") + 1]
        if not os.path.isfile(os.path.join(destdir, "dict.txt" if "--only-source" in args else "dict.src.txt")):
            subprocess.run([os.path.join(BIN, "fairseq-preprocess"), *args, "--workers", "1"], check=True,
                           capture_output=True)
    return raw


def gpt2_arm(work: str, raw: str) -> Tuple[Optional[List[str]], Optional[str]]:
    """fairseq-train's arguments of the GPT-2 arm (a tiny random GPT-2, converted, fine-tuned
    from the conversion on the toy text encoded with its BPE, as ``--bpe gpt2`` encodes), or
    ``(None, the reason it cannot run)``."""
    from fairseq_plugins.lab.gpt2.convert import convert
    from fairseq_plugins.lab.gpt2.tiny import make_tiny_gpt2

    hf, conv, data = f"{work}/gpt2hf", f"{work}/gpt2", f"{work}/gpt2lm"
    if not os.path.isfile(f"{conv}/checkpoint.pt"):
        try:
            make_tiny_gpt2(hf)
        except ConfigError as e:
            return None, str(e)[:100]
        convert(hf, conv, tokens_per_sample=32)
    if not os.path.isfile(f"{data}/dict.txt"):
        from fairseq.data.encoders.gpt2_bpe_utils import get_encoder

        bpe = get_encoder(f"{hf}/vocab.json", f"{hf}/merges.txt")
        for split in ("train", "valid"):
            with open(f"{raw}/{split}.txt") as f, open(f"{raw}/{split}.gpt2", "w") as out:
                out.writelines(" ".join(map(str, bpe.encode(line.rstrip("\n")))) + "\n" for line in f)
        subprocess.run([os.path.join(BIN, "fairseq-preprocess"), "--only-source", "--srcdict", f"{conv}/dict.txt",
                        "--trainpref", f"{raw}/train.gpt2", "--validpref", f"{raw}/valid.gpt2", "--destdir", data,
                        "--workers", "1"], check=True, capture_output=True)
    with open(f"{conv}/model-args.txt") as f:
        model_args = f.read().split()
    return [data, "--task", "streaming_lm", *model_args, "--criterion", "infinite_former_kl",
            "--tokens-per-sample", "32", "--batch-size", "8", "--num-basis-functions", "32", "--num-samples", "32",
            "--restore-file", f"{conv}/checkpoint.pt", "--reset-optimizer", "--reset-lr-scheduler",
            "--reset-meters", "--reset-dataloader"], None


def prepare(work: str, updates: int) -> Tuple[Dict[str, Optional[List[str]]], Optional[str], List[str]]:
    """``(model → its fairseq-train arguments or None, why the GPT-2 arm is skipped, the common
    arguments)``, with the toy data and the GPT-2 conversion written into ``work``."""
    from fairseq_plugins.lab.common import arms

    raw = toy_data(work)
    models: Dict[str, Optional[List[str]]] = {
        arm.name: [f"{work}/{'mt' if arm.task == 'translation' else 'lm'}",
                   *arms.train_args("precision", arm.name, root="", save_dir="", cpu=False)]
        for arm in arms.job("precision").arms}
    models["infinite_former_gpt2"], gpt2_skip = gpt2_arm(work, raw)
    common = ["--user-dir", PACKAGE_DIR, "--optimizer", "adam", "--lr", "3e-3", "--max-update", str(updates),
              "--log-format", "json", "--log-interval", "1", "--disable-validation", "--no-save", "--seed", "1",
              "--dropout", "0", "--required-batch-size-multiple", "1", "--num-workers", "0",
              "--save-dir", f"{work}/save"]  # never a checkpoints/ folder of the checkout
    return models, gpt2_skip, common


def print_command_lines(models, gpt2_skip: Optional[str], common: List[str], kept: bool) -> None:
    """The dry run: one line per row, ``model<TAB>precision<TAB>fairseq-train command``."""
    print("model\tprecision\tfairseq-train command" + ("" if kept else
          "  (its files are removed at exit: pass --keep DIR to run these lines)"))
    train_cli = os.path.join(BIN, "fairseq-train")
    for model, args in models.items():
        for name, flags in PRECISIONS.items():
            line = f"SKIP ({gpt2_skip})" if args is None else shlex.join([train_cli, *args, *common, *flags])
            print(f"{model}\t{name}\t{line}")


def train(args: List[str]) -> Tuple[Dict[int, float], Optional[str]]:
    """Run fairseq-train: ``(update → logged loss, the last output line if it failed)``."""
    proc = subprocess.run([os.path.join(BIN, "fairseq-train"), *args], capture_output=True, text=True)
    text = proc.stdout + proc.stderr
    losses = {}
    for line in text.splitlines():
        if "train_inner" in line and "{" in line:
            row = json.loads(line[line.index("{"):])
            losses[int(row["num_updates"])] = float(row["loss"])
    return losses, None if proc.returncode == 0 else (text.strip().splitlines() or ["failed"])[-1][:100]


def run_checks(models, gpt2_skip: Optional[str], common: List[str], updates: int) -> int:
    """Train every row, print it as it finishes, then the table; returns the number of failed rows."""
    import torch
    # apex: fairseq.modules.LayerNorm returns apex's FusedLayerNorm and --optimizer adam uses
    # FusedAdam when apex imports and CUDA is present (the plugin's layers use fairseq's LayerNorm)
    from fairseq.modules import layer_norm
    from fairseq.optim.fused_adam import get_fused_adam_class

    from fairseq_plugins.lab.common.table import Column, markdown

    fused_ln, fused_adam = bool(layer_norm.has_fused_layernorm), get_fused_adam_class() is not None
    print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; "
          f"apex FusedLayerNorm: {'in use' if fused_ln else 'not installed (torch LayerNorm)'}; "
          f"apex FusedAdam: {'in use' if fused_adam else 'not installed (torch Adam)'}", flush=True)
    rows, failed = [], 0
    for model, args in models.items():
        reference = None
        for name, flags in PRECISIONS.items():
            if args is None:  # the GPT-2 arm without the [hf] extra
                rows.append((model, name, "—", "—", "—", f"SKIP: {gpt2_skip}"))
                print(" | ".join(rows[-1]), flush=True)
                continue
            losses, error = train([*args, *common, *flags])
            values = [losses[u] for u in sorted(losses)]
            if name == "fp32":
                reference = values[-1] if values and error is None else None
            ok = (error is None and len(values) >= updates // 2 and all(math.isfinite(v) for v in values)
                  and values[-1] < values[0] and (reference is None or abs(values[-1] - reference) < 0.5))
            failed += not ok
            rows.append((model, name, f"{values[0]:.3f}" if values else "—", f"{values[-1]:.3f}" if values else "—",
                         f"{reference:.3f}" if reference is not None else "—",
                         "PASS" if ok else f"FAIL{': ' + error if error else ''}"))
            print(" | ".join(map(str, rows[-1])), flush=True)
    print()
    titles = ["model", "precision", "first loss", "last loss", "fp32 last loss", "result"]
    print(markdown([dict(zip(titles, row)) for row in rows], [Column(t, t) for t in titles]))
    skipped = sum(row[-1].startswith("SKIP") for row in rows)
    print(f"\n{len(rows) - failed - skipped}/{len(rows)} passed, {skipped} skipped ({updates} updates each, "
          "losses in bits)")
    return failed
