# Shared by the scripts: find a Python, create the app environment (.venv) once.
# The engine's environment (.venv-engine) is created by `ernie-chat up` itself, because
# which vLLM build it needs depends on the machine (server/stack/engine_env.py).

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"

supported_python() {
    "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null
}

find_python() {
    # 3.11 first: our machines hold the CPU build of torch for it. 3.11 is also the floor:
    # 21 pins of requirements/app.txt need it (README: set-up); 3.12 and 3.13 are tested too.
    if [ -n "${ERNIE_PYTHON:-}" ]; then
        supported_python "$ERNIE_PYTHON" && { echo "$ERNIE_PYTHON"; return 0; }
        echo "ERROR: ERNIE_PYTHON=$ERNIE_PYTHON is not a Python 3.11 or newer that runs." >&2
        return 1
    fi
    local candidate
    for candidate in python3.11 python3.12 python3.13 python3; do
        supported_python "$candidate" && { echo "$candidate"; return 0; }
    done
    echo "ERROR: Python 3.11 or newer is needed (3.11, 3.12 and 3.13 are tested); install one," \
         "or set ERNIE_PYTHON to its path." >&2
    return 1
}

digest16() {
    # macOS has shasum but no sha256sum.
    if command -v sha256sum >/dev/null; then sha256sum; else shasum -a 256; fi | cut -c1-16
}

ensure_app_env() {
    local stamp="$VENV/.ernie-chat-stamp" want
    want="$(digest16 <"$ROOT/requirements/app.txt")"
    if [ -x "$VENV/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
        return 0
    fi
    local python start=$SECONDS
    python="$(find_python)"
    echo "[setup] creating the app environment in .venv with $("$python" --version) (first time: about 1-2 min)"
    [ -x "$VENV/bin/python" ] || "$python" -m venv "$VENV"
    mkdir -p "$ROOT/.cache"
    # A frozen, complete tree installed without the resolver: Chainlit's dependencies make
    # pip backtrack for minutes otherwise (docs/notes.md). pip asks the indexes for one package
    # after another, so four pips, each a quarter of the pins, wait on them at once (15 s
    # instead of 28 on 2 cores, the same tree). pip compiles the bytecode on one core;
    # compileall does it on all of them (13 s became 8 s on 2 cores).
    local part parts=4 pids=() failed=""
    for ((part = 0; part < parts; part++)); do
        awk -v part="$part" -v parts="$parts" 'NF && $1 !~ /^#/ && (n++ % parts) == part' \
            "$ROOT/requirements/app.txt" >"$ROOT/.cache/app-pins-$part.txt"
        "$VENV/bin/python" -m pip install --disable-pip-version-check --no-deps --no-compile \
            -r "$ROOT/.cache/app-pins-$part.txt" >"$ROOT/.cache/setup-app-$part.log" 2>&1 &
        pids+=($!)
    done
    for ((part = 0; part < parts; part++)); do
        wait "${pids[$part]}" || { [ -n "$failed" ] || tail -n 20 "$ROOT/.cache/setup-app-$part.log" >&2; failed=1; }
        cat "$ROOT/.cache/setup-app-$part.log"
        rm -f "$ROOT/.cache/setup-app-$part.log" "$ROOT/.cache/app-pins-$part.txt"
    done >"$ROOT/.cache/setup-app.log"
    if [ -n "$failed" ]; then
        echo "ERROR: installing the app environment failed; full output in .cache/setup-app.log" >&2
        return 1
    fi
    # A file that does not compile (a package's Python 2 example) is left as pip leaves it.
    "$VENV/bin/python" -m compileall -q -j 0 "$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
        >>"$ROOT/.cache/setup-app.log" 2>&1 || true
    echo "$want" >"$stamp"
    echo "[setup] app environment ready ($((SECONDS - start)) s)"
}
