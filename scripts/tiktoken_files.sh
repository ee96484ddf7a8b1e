#!/usr/bin/env bash
# Fetch tiktoken's cl100k_base and o200k_base BPE files from the litellm wheel
# (PyPI), check their hashes and store them under tiktoken's cache names.
# Failure is not fatal: token counting falls back to a len/4 estimate.
set -uo pipefail
dest=${1:?destination folder}
mkdir -p "$dest"
declare -A files=(
  [9b5ad71b2ce5302211f9c61530b329a4922fc6a4]="cl100k_base.tiktoken 223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
  [fb374d419588a4632f3f557e76b4b70aebbca790]="o200k_base.tiktoken 446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
)
missing=0
for key in "${!files[@]}"; do [ -f "$dest/$key" ] || missing=1; done
[ $missing = 0 ] && exit 0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
py=${PYTHON_BIN:-.venv/bin/python}
if ! $py -m pip download -q --no-deps "litellm==1.109.1" -d "$tmp" >/dev/null 2>&1; then
  echo "warning: could not download tiktoken files; token counts use a len/4 estimate" >&2
  exit 0
fi
for key in "${!files[@]}"; do
  read -r name sha <<<"${files[$key]}"
  # The wheel keeps them under tiktoken's cache names (older notes say $name).
  unzip -q -o -j "$tmp"/litellm-*.whl "litellm/litellm_core_utils/tokenizers/$key" -d "$tmp" 2>/dev/null \
    || unzip -q -o -j "$tmp"/litellm-*.whl "litellm/litellm_core_utils/tokenizers/$name" -d "$tmp" 2>/dev/null \
    || { echo "warning: $name not found in the litellm wheel" >&2; continue; }
  [ -f "$tmp/$key" ] || mv "$tmp/$name" "$tmp/$key"
  if [ "$(sha256sum "$tmp/$key" | cut -d' ' -f1)" = "$sha" ]; then
    mv "$tmp/$key" "$dest/$key"
  else
    echo "warning: $name hash mismatch; skipped" >&2
  fi
done
