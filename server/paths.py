"""Where the project's files are, whatever the working directory."""

from pathlib import Path

# server/paths.py -> the repository root
ROOT = Path(__file__).resolve().parent.parent
# Results of bench, tune and qa-load when no --out is given (ignored by git).
RESULTS_DIR = ROOT / "benchmarks" / "results"
# The key `up` makes for an exposed engine when ERNIE_API_KEY is unset, below the root it runs in.
GENERATED_ENGINE_KEY = Path(".cache") / "engine-api-key"
