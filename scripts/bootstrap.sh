#!/usr/bin/env bash
# Create or refresh .venv. torch goes in first (CPU build) and is then pinned by a
# constraints file, so sentence-transformers never pulls a CUDA build of torch.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv
STAMP=$VENV/.vcloud-stamp
want=$(cat pyproject.toml scripts/bootstrap.sh | sha256sum | cut -d' ' -f1)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
  touch "$STAMP"
  exit 0
fi
[ -x $VENV/bin/python ] || $PY -m venv $VENV
PIP="$VENV/bin/python -m pip --disable-pip-version-check -q"
$PIP install --upgrade pip setuptools wheel >/dev/null
# Torch, CPU only. Here the +cpu wheel is found locally; elsewhere set
# TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu or fall back to PyPI's 2.13.
if ! $VENV/bin/python -c "import torch" 2>/dev/null; then
  if [ -n "${TORCH_INDEX_URL:-}" ]; then
    $PIP install "torch==2.13.0+cpu" --index-url "$TORCH_INDEX_URL"
  else
    $PIP install "torch==2.13.0+cpu" 2>/dev/null || $PIP install "torch==2.13.*"
  fi
fi
torch_version=$($VENV/bin/python -c "import torch; print(torch.__version__)")
echo "torch==$torch_version" > $VENV/constraints.txt
$PIP install -c $VENV/constraints.txt -e ".[dev]"
# tiktoken's BPE files, offline: they ship inside the litellm wheel on PyPI.
scripts/tiktoken_files.sh "$VENV/tiktoken"
echo "$want" > "$STAMP"
