#!/usr/bin/env bash
# Everything the lent H200 needs for crowd.sh, built HERE (needs PyPI and apt; ~6 minutes):
#     GPU_KIT=<the offline vLLM bundle's tools> bash benchmarks/gpu/prepare.sh   (kit.sh)
#     MODEL_DIR=<a model folder>: copied to .gpu/model instead of making the shape model
# -> .gpu/c1.. (vLLM 0.26's bundle), .gpu/a1.. (the app's wheels), .gpu/model (the shape model),
#    .gpu/haproxy.tgz (Debian 12's HAProxy with the libraries the H200 lacks), .gpu/py-spy.
# A call carries 64 MiB with the tree (its files counted in whole 4-KiB blocks; with the tree at
# ~47 MiB, 19-MiB pieces no longer fit), so the bundle and the wheels
# go in pieces of CHUNK_MB (14) MiB, one folder per call; crowd.sh's header lists the calls.
set -euo pipefail
source "$(dirname "$0")/kit.sh"
chunk=${CHUNK_MB:-14}
[ -d .gpu/c1 ] || { build=$(gpu_kit build_bundle.sh); bash "$build"; }
# build_bundle.sh splits in 58-MiB pieces; install.sh joins whatever part.* it finds, in order.
if [ "$(stat -c %s .gpu/c1/part.* | head -n 1)" -gt $((chunk * 1048576)) ]; then
    cat .gpu/c[0-9]*/part.* > /tmp/vllm_site.tar.xz && rm -rf .gpu/c[0-9]*
    (cd /tmp && split -b "${chunk}M" -a 2 vllm_site.tar.xz part. && rm vllm_site.tar.xz)
    i=0; for f in /tmp/part.??; do i=$((i + 1)); mkdir -p ".gpu/c$i"; mv "$f" ".gpu/c$i/"; done
fi
if [ -d .gpu/a1 ] && [ "$(stat -c %s .gpu/a1/part.* | head -n 1)" -gt $((chunk * 1048576)) ]; then
    rm -rf .gpu/a[0-9]*  # pieces of an older, larger size: built again (~1-2 min, from PyPI)
fi
[ -d .gpu/a1 ] || CHUNK_MB=$chunk bash benchmarks/gpu/app_wheels.sh
if [ ! -f .gpu/model/config.json ] && [ -n "${MODEL_DIR:-}" ]; then
    [ -f "$MODEL_DIR/config.json" ] || { echo "MODEL_DIR=$MODEL_DIR: no config.json, not a model folder" >&2; exit 2; }
    mkdir -p .gpu && cp -r "$MODEL_DIR" .gpu/model
fi
if [ ! -f .gpu/model/config.json ]; then
    shape=$(gpu_kit make_shape_model.py)
    python3 -m venv /tmp/shape-env
    /tmp/shape-env/bin/pip install -q transformers==5.19.0 tokenizers==0.23.3
    /tmp/shape-env/bin/python "$shape" .gpu/model
fi
if [ ! -f .gpu/haproxy.tgz ]; then
    command -v haproxy >/dev/null || { apt-get update -qq && apt-get install -y -qq haproxy >/dev/null; }
    stage=$(mktemp -d); mkdir -p "$stage/lib"
    cp "$(command -v haproxy)" "$stage/haproxy.bin"
    # The libraries glibc does not bring (the H200's image lacks Lua, PCRE2, OpenSSL 3's build of them)
    ldd "$stage/haproxy.bin" | awk '/=> \//{print $3}' | grep -v -E '/lib(c|m|dl|pthread|rt)\.so' \
        | xargs -I{} cp -L {} "$stage/lib/"
    printf '#!/bin/sh\nhere=$(dirname "$0")\nLD_LIBRARY_PATH=$here/lib exec "$here/haproxy.bin" "$@"\n' > "$stage/haproxy"
    chmod +x "$stage/haproxy"; tar -czf .gpu/haproxy.tgz -C "$stage" . && rm -rf "$stage"
fi
[ -x .gpu/py-spy ] || { [ -x .venv/bin/py-spy ] && cp .venv/bin/py-spy .gpu/py-spy; } || true
du -sh .gpu/c* .gpu/a* .gpu/model .gpu/haproxy.tgz
