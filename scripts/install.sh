#!/usr/bin/env bash
# Create ./.venv (or reuse it) and install fairseq-longmem with its test extras.
# torch is installed first, pinned (TORCH_SPEC): the build pip's index serves (a CPU wheel where
# the index has one; PyPI's Linux wheel is the CUDA one: for a CPU-only build install it into .venv first
# from https://download.pytorch.org/whl/cpu); a torch already installed is kept, and so is any
# with TORCH_SPEC="".
#
#   bash scripts/install.sh            (environment: PYTHON=python3, TORCH_SPEC=torch==2.13.0)
set -euo pipefail
if [ $# -gt 0 ]; then
  case "$1" in
    -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: error: no arguments expected, got '$1' (see --help)" >&2; exit 2 ;;
  esac
fi
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC-torch==2.13.0}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
if [ -n "$TORCH_SPEC" ] && ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/python -m pip install -q "$TORCH_SPEC"
fi
.venv/bin/python -m pip install -q -e ".[test]"
# fairseq depends on torchaudio, and pip may pick a build that does not load with this torch
# (none exists for torch 2.13). fairseq never imports it for text, but transformers (the [hf]
# extra, part of [test]) does whenever it is installed: a torchaudio that cannot be imported
# is removed (docs/gpt2.md, "Install").
if .venv/bin/python -m pip show -q torchaudio >/dev/null 2>&1 \
    && ! .venv/bin/python -c "import torchaudio" >/dev/null 2>&1; then
  .venv/bin/python -m pip uninstall -q -y torchaudio
  echo "removed torchaudio: it does not load with this torch (no text task needs it)"
fi
echo "installed into $(pwd)/.venv"
