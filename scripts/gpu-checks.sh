#!/usr/bin/env bash
# Mixed-precision checks on a CUDA machine (issue 5, part 3).
#
#   bash scripts/gpu-checks.sh [--updates 40] [--keep DIR]
#
# Trains infinite_former_lm (streaming_lm), fastformer_lm (language_modeling) and the
# fastformer encoder-decoder (fastformer_tiny, translation) on generated toy data with
# fairseq-train, in fp32 and with --fp16, --memory-efficient-fp16, --amp and --bf16, and
# prints a table: first/last loss, the fp32 run's last loss, PASS when every logged loss is
# finite, the run learns (last < first) and ends within 0.5 bit of fp32. It says whether
# apex's fused LayerNorm / Adam are in use (fairseq picks them itself when apex imports and
# CUDA is present; apex is never required). Exit status 1 when a row fails.
# Without a CUDA device it prints "no CUDA device: skipped" and exits 0 (the CPU tests,
# tests/test_precision_and_faults.py, cover what a CPU can run).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
UPDATES=40
KEEP=
while [ $# -gt 0 ]; do
  case "$1" in
    --updates) UPDATES=$2; shift 2 ;;
    --keep) KEEP=$2; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-checks.sh: error: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
cuda=0
"$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)" 2>/dev/null || cuda=$?
if [ "$cuda" = 3 ]; then
  echo "no CUDA device: skipped"
  exit 0
elif [ "$cuda" != 0 ]; then
  echo "gpu-checks.sh: error: $PY cannot import torch; activate the project's environment (scripts/install.sh)" >&2
  exit 2
fi
WORK=${KEEP:-$(mktemp -d)}
mkdir -p "$WORK"
[ -n "$KEEP" ] || trap 'rm -rf "$WORK"' EXIT

UPDATES=$UPDATES WORK=$WORK "$PY" - <<'EOF'
import json, math, os, random, subprocess, sys

import torch

work, updates = os.environ["WORK"], int(os.environ["UPDATES"])
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

# the three models, toy sizes (scripts/arms.py, job precision)
sys.path.insert(0, os.path.abspath("scripts"))
import arms
models = {arm.name: [f"{work}/{'mt' if arm.task == 'translation' else 'lm'}",
                     *arms.train_args("precision", arm.name, root="", save_dir="", cpu=False)]
          for arm in arms.JOBS["precision"].arms}
precisions = {"fp32": [], "fp16": ["--fp16"], "memory-efficient-fp16": ["--memory-efficient-fp16"],
              "amp": ["--amp"], "bf16": ["--bf16"]}
common = ["--user-dir", user_dir, "--optimizer", "adam", "--lr", "3e-3", "--max-update", str(updates),
          "--log-format", "json", "--log-interval", "1", "--disable-validation", "--no-save", "--seed", "1",
          "--dropout", "0", "--required-batch-size-multiple", "1", "--num-workers", "0"]

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
    proc = subprocess.run([os.path.join(bindir, "fairseq-train"), *models[model], *common, *flags],
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
from results_table import Column, markdown
titles = ["model", "precision", "first loss", "last loss", "fp32 last loss", "result"]
print(markdown([dict(zip(titles, row)) for row in rows], [Column(t, t) for t in titles]))
print(f"\n{len(rows) - failed}/{len(rows)} passed ({updates} updates each, losses in bits)")
sys.exit(1 if failed else 0)
EOF
