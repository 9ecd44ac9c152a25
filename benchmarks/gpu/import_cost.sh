#!/usr/bin/env bash
# Does the lent machine's Python pay for byte-code a real install would have? (A start-up
# figure should tell apart what a real install would not pay.) Needs only python3 and the machine's torch:
#     bash benchmarks/gpu/import_cost.sh            (on the H200, ~2 min; no vLLM needed)
# Prints, for the machine's own site-packages: how many .py files have a cached .pyc, whether
# Python may write one there, and `import torch` / `import torch._dynamo` timed three times as
# found, then three times with every module byte-compiled into a private cache
# (PYTHONPYCACHEPREFIX), which is what pip's install-time compile gives a user.
set -uo pipefail
site=$(python3 -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')
py=$(find "$site/torch" "$site/sympy" -name '*.py' | wc -l)
pyc=$(find "$site/torch" "$site/sympy" -name '*.cpython-3*.pyc' | wc -l)
echo "site-packages: $site"
echo "torch + sympy: $py .py files, $pyc cached .pyc; writable: $([ -w "$site/torch" ] && echo yes || echo no)"
t() { python3 -c 'import time; t = time.perf_counter(); import torch, torch._dynamo; print(f"{time.perf_counter() - t:.1f}")'; }
echo "import torch, torch._dynamo as found (s): $(t) $(t) $(t)"
export PYTHONPYCACHEPREFIX=/tmp/pycache-prefix
start=$SECONDS; python3 -m compileall -q -j 0 "$site/torch" "$site/sympy" "$site/transformers" >/dev/null 2>&1
echo "byte-compiled into $PYTHONPYCACHEPREFIX in $((SECONDS - start)) s"
echo "import torch, torch._dynamo, byte-code cached (s): $(t) $(t) $(t)"
