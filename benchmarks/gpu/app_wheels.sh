#!/usr/bin/env bash
# The app's pinned wheels for the H200's Python 3.12, one package at a time (here, needs PyPI):
#     GPU_KIT=<the offline vLLM bundle's tools> bash benchmarks/gpu/app_wheels.sh
#         -> .gpu/a1, .gpu/a2 ... and .gpu/APP_SHA256, and the kit's stack_env.sh in .gpu/ (kit.sh)
# The kit's stack_env.sh wheels downloads them in one `pip download -r`, which stops at the
# first pin without a cp312 wheel (cuid, an sdist) and then builds EVERY pin here, for this
# machine's Python 3.11: the H200's pip refuses those (seen 2026-12-01). Here each pin is
# downloaded on its own, and only the sdist-only ones (pure Python) are built.
set -euo pipefail
source "$(dirname "$0")/kit.sh"
stack_env=$(gpu_kit stack_env.sh)
work=$(mktemp -d); mkdir -p "$work/w"
grep -v -i '^playwright==' requirements/app.txt | grep -E '^[A-Za-z0-9_.-]+==' > "$work/req.txt"
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64
      --platform manylinux1_x86_64 --platform any)
xargs -P 8 -I{} sh -c "python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp ${plat[*]} -d '$work/w' '{}' >/dev/null 2>&1 || echo '{}' >> '$work/sdist.txt'" < "$work/req.txt"
[ -f "$work/sdist.txt" ] && xargs -I{} python3 -m pip wheel -q --no-deps -w "$work/w" '{}' < "$work/sdist.txt"
n=$(ls "$work/w" | wc -l); want=$(wc -l < "$work/req.txt")
[ "$n" -eq "$want" ] || { echo "app_wheels: $n of $want wheels" >&2; exit 2; }
if ls "$work/w" | grep -E 'cp3(10|11|13)-cp3' ; then echo "app_wheels: wheels for another Python (above)" >&2; exit 2; fi
rm -rf .gpu/a[0-9]*; mkdir -p .gpu
tar -C "$work/w" -cf "$work/app-wheels.tar" .
(cd "$work" && split -b "${CHUNK_MB:-14}M" -a 1 -d app-wheels.tar part. && sha256sum app-wheels.tar > APP_SHA256)
for f in "$work"/part.*; do d=".gpu/a$(( ${f##*.} + 1 ))"; mkdir -p "$d"; mv "$f" "$d/"; done
cp "$work/APP_SHA256" .gpu/ && cp "$stack_env" .gpu/ && rm -rf "$work"
echo "app_wheels: $n wheels in $(ls -d .gpu/a[0-9]* | wc -l) chunk folders"
