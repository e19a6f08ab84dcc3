#!/usr/bin/env bash
# Mixed-precision checks on a CUDA machine.
#
#   bash scripts/gpu-checks.sh [--updates 40] [--keep DIR] [--dry-run]
#
# Trains infinite_former_lm (streaming_lm), fastformer_lm (language_modeling), the
# fastformer encoder-decoder (fastformer_tiny, translation) and infinite_former_gpt2 (a tiny
# random GPT-2 built here with scripts/make_tiny_gpt2.py, converted with
# scripts/convert_hf_gpt2.py and fine-tuned from it with --restore-file; needs the [hf]
# extra, else its rows say SKIP) on generated toy data with fairseq-train, in fp32 and with
# --fp16, --memory-efficient-fp16, --amp and --bf16, and prints a table: first/last loss,
# the fp32 run's last loss, PASS when every logged loss is finite, the run learns
# (last < first) and ends within 0.5 bit of fp32. It says whether apex's fused LayerNorm /
# Adam are in use (fairseq picks them itself when apex imports and CUDA is present; apex is
# never required). Exit status 1 when a row fails.
# Without a CUDA device it prints "no CUDA device: skipped" and exits 0 (the CPU tests,
# tests/test_precision_and_faults.py, cover what a CPU can run).
# --dry-run (no CUDA needed): prepare everything (toy data, tiny GPT-2, conversion) and print
# each row's fairseq-train command line, one per line (model, precision, command; tab-separated),
# instead of training; with --keep DIR the prepared files stay there, so the lines can be run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
UPDATES=40
KEEP=
DRY_RUN=0
while [ $# -gt 0 ]; do
  case "$1" in
    --updates) UPDATES=${2:?--updates needs a number}; shift 2 ;;
    --keep) KEEP=${2:?--keep needs a folder}; shift 2 ;;
    --dry-run) DRY_RUN=1; shift ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-checks.sh: error: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$UPDATES" in
  ''|*[!0-9]*|0) echo "gpu-checks.sh: error: --updates must be a positive number, got '$UPDATES'" >&2; exit 2 ;;
esac
cuda=0
"$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)" 2>/dev/null || cuda=$?
if [ "$cuda" = 3 ] && [ "$DRY_RUN" = 0 ]; then
  echo "no CUDA device: skipped"
  exit 0
elif [ "$cuda" != 0 ] && [ "$cuda" != 3 ]; then
  echo "gpu-checks.sh: error: $PY cannot import torch; activate the project's environment (scripts/install.sh)" >&2
  exit 2
fi
WORK=${KEEP:-$(mktemp -d)}
mkdir -p "$WORK"
[ -n "$KEEP" ] || trap 'rm -rf "$WORK"' EXIT

UPDATES=$UPDATES WORK=$WORK KEEP=$KEEP DRY_RUN=$DRY_RUN "$PY" - <<'EOF'
import json, math, os, random, shlex, subprocess, sys

import torch

work, updates, dry_run = os.environ["WORK"], int(os.environ["UPDATES"]), os.environ["DRY_RUN"] == "1"
bindir = os.path.dirname(sys.executable)
user_dir = os.path.abspath("fairseq_plugins")

# toy data: word progressions (learnable) for the LMs, reversal for translation
rng = random.Random(0)
words = [f"w{i}" for i in range(40)]
def lines(n):
    return [" ".join(words[(s + 3 * k) % 40] for k in range(rng.randint(5, 15)))
            for s in (rng.randrange(40) for _ in range(n))]
raw = os.path.join(work, "raw")
os.makedirs(raw, exist_ok=True)
for split, n in (("train", 2000), ("valid", 100)):
    open(os.path.join(raw, f"{split}.txt"), "w").write("\n".join(lines(n)) + "\n")
    src = lines(n)
    open(os.path.join(raw, f"{split}.src"), "w").write("\n".join(src) + "\n")
    open(os.path.join(raw, f"{split}.tgt"), "w").write("\n".join(" ".join(reversed(s.split())) for s in src) + "\n")
pre = os.path.join(bindir, "fairseq-preprocess")
for args in (["--only-source", "--trainpref", f"{raw}/train.txt", "--validpref", f"{raw}/valid.txt",
              "--destdir", f"{work}/lm"],
             ["-s", "src", "-t", "tgt", "--trainpref", f"{raw}/train", "--validpref", f"{raw}/valid",
              "--destdir", f"{work}/mt", "--joined-dictionary"]):
    if not os.path.isfile(os.path.join(args[args.index("--destdir") + 1], "dict.txt" if "--only-source" in args
                                       else "dict.src.txt")):
        subprocess.run([pre, *args, "--workers", "1"], check=True, capture_output=True)

# the three models, toy sizes (fairseq-longmem arms, job precision)
from fairseq_plugins.experiments import arms
models = {arm.name: [f"{work}/{'mt' if arm.task == 'translation' else 'lm'}",
                     *arms.train_args("precision", arm.name, root="", save_dir="", cpu=False)]
          for arm in arms.JOBS["precision"].arms}

# the GPT-2 arm: a tiny random GPT-2 (transformers' own classes), converted, fine-tuned from
# the conversion on the toy text encoded with its BPE (fairseq's GPT-2 encoder, as --bpe gpt2)
def gpt2_arm():
    """fairseq-train's arguments of the GPT-2 arm, or the reason it cannot run."""
    hf, conv, data = f"{work}/gpt2hf", f"{work}/gpt2", f"{work}/gpt2lm"
    if not os.path.isfile(f"{conv}/checkpoint.pt"):
        made = subprocess.run([sys.executable, "scripts/make_tiny_gpt2.py", "--out", hf], capture_output=True, text=True)
        if made.returncode != 0:
            return None, (made.stderr.strip().splitlines() or ["make_tiny_gpt2.py failed"])[-1][:100]
        subprocess.run([sys.executable, "scripts/convert_hf_gpt2.py", "--hf-dir", hf, "--out", conv,
                        "--tokens-per-sample", "32"], check=True, capture_output=True)
    if not os.path.isfile(f"{data}/dict.txt"):
        from fairseq.data.encoders.gpt2_bpe_utils import get_encoder
        bpe = get_encoder(f"{hf}/vocab.json", f"{hf}/merges.txt")
        for split in ("train", "valid"):
            with open(f"{raw}/{split}.txt") as f, open(f"{raw}/{split}.gpt2", "w") as out:
                out.writelines(" ".join(map(str, bpe.encode(line.rstrip("\n")))) + "\n" for line in f)
        subprocess.run([pre, "--only-source", "--srcdict", f"{conv}/dict.txt", "--trainpref", f"{raw}/train.gpt2",
                        "--validpref", f"{raw}/valid.gpt2", "--destdir", data, "--workers", "1"],
                       check=True, capture_output=True)
    with open(f"{conv}/model-args.txt") as f:
        model_args = f.read().split()
    return [data, "--task", "streaming_lm", *model_args, "--criterion", "infinite_former_kl",
            "--tokens-per-sample", "32", "--batch-size", "8", "--num-basis-functions", "32", "--num-samples", "32",
            "--restore-file", f"{conv}/checkpoint.pt", "--reset-optimizer", "--reset-lr-scheduler",
            "--reset-meters", "--reset-dataloader"], None

gpt2_args, gpt2_skip = gpt2_arm()
models["infinite_former_gpt2"] = gpt2_args
precisions = {"fp32": [], "fp16": ["--fp16"], "memory-efficient-fp16": ["--memory-efficient-fp16"],
              "amp": ["--amp"], "bf16": ["--bf16"]}
common = ["--user-dir", user_dir, "--optimizer", "adam", "--lr", "3e-3", "--max-update", str(updates),
          "--log-format", "json", "--log-interval", "1", "--disable-validation", "--no-save", "--seed", "1",
          "--dropout", "0", "--required-batch-size-multiple", "1", "--num-workers", "0",
          "--save-dir", f"{work}/save"]  # never a checkpoints/ folder of the checkout
train_cli = os.path.join(bindir, "fairseq-train")

if dry_run:
    print("model\tprecision\tfairseq-train command" + ("" if os.environ.get("KEEP") else
          "  (its files are removed at exit: pass --keep DIR to run these lines)"))
    for model, args in models.items():
        for name, flags in precisions.items():
            line = f"SKIP ({gpt2_skip})" if args is None else shlex.join([train_cli, *args, *common, *flags])
            print(f"{model}\t{name}\t{line}")
    sys.exit(0)

# apex: fairseq.modules.LayerNorm returns apex's FusedLayerNorm and --optimizer adam uses
# FusedAdam when apex imports and CUDA is present (the plugin's layers use fairseq's LayerNorm)
from fairseq.modules import layer_norm
from fairseq.optim.fused_adam import get_fused_adam_class
fused_ln = bool(layer_norm.has_fused_layernorm)
fused_adam = get_fused_adam_class() is not None
print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; "
      f"apex FusedLayerNorm: {'in use' if fused_ln else 'not installed (torch LayerNorm)'}; "
      f"apex FusedAdam: {'in use' if fused_adam else 'not installed (torch Adam)'}", flush=True)

def train(model, flags):
    proc = subprocess.run([train_cli, *models[model], *common, *flags],
                          capture_output=True, text=True)
    text = proc.stdout + proc.stderr
    losses = {}
    for line in text.splitlines():
        if "train_inner" in line and "{" in line:
            row = json.loads(line[line.index("{"):])
            losses[int(row["num_updates"])] = float(row["loss"])
    error = None if proc.returncode == 0 else (text.strip().splitlines() or ["failed"])[-1][:100]
    return losses, error

rows, failed = [], 0
for model in models:
    reference = None
    for name, flags in precisions.items():
        if models[model] is None:  # the GPT-2 arm without the [hf] extra
            rows.append((model, name, "—", "—", "—", f"SKIP: {gpt2_skip}"))
            print(" | ".join(rows[-1]), flush=True)
            continue
        losses, error = train(model, flags)
        values = [losses[u] for u in sorted(losses)]
        if name == "fp32":
            reference = values[-1] if values and error is None else None
        ok = (error is None and len(values) >= updates // 2 and all(math.isfinite(v) for v in values)
              and values[-1] < values[0]
              and (reference is None or abs(values[-1] - reference) < 0.5))
        failed += not ok
        rows.append((model, name, f"{values[0]:.3f}" if values else "—", f"{values[-1]:.3f}" if values else "—",
                     f"{reference:.3f}" if reference is not None else "—",
                     "PASS" if ok else f"FAIL{': ' + error if error else ''}"))
        print(" | ".join(map(str, rows[-1])), flush=True)
print()
from fairseq_plugins.report.table import Column, markdown
titles = ["model", "precision", "first loss", "last loss", "fp32 last loss", "result"]
print(markdown([dict(zip(titles, row)) for row in rows], [Column(t, t) for t in titles]))
skipped = sum(row[-1].startswith("SKIP") for row in rows)
print(f"\n{len(rows) - failed - skipped}/{len(rows)} passed, {skipped} skipped ({updates} updates each, losses in bits)")
sys.exit(1 if failed else 0)
EOF
