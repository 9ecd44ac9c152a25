"""The repository's Grafana dashboard, and its queries as Grafana sends them to Prometheus.

Its vLLM panels filter by the ``model`` variable (``model=~"$model"``), the label
``ernie-chat scrape-config`` gives each model's engine. :func:`with_models` fills the variable in
as Grafana does, so that the dashboard's queries can be run without Grafana (the tests,
benchmarks/monitoring/dashboard_png.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Optional

from server.paths import ROOT

FILE = ROOT / "server" / "stack" / "monitoring" / "grafana-dashboard.json"
VARIABLE = "model"
# What Grafana's Prometheus data source escapes in each chosen value of a multi-value variable.
REGEX_SPECIAL = re.compile(r"[$^*{}\[\]'+?.()|]")


def load() -> dict:
    return json.loads(FILE.read_text())


def variable(dashboard: dict) -> dict:
    [found] = [v for v in dashboard["templating"]["list"] if v["name"] == VARIABLE]
    return found


def regex_escaped(value: str) -> str:
    """A value as Grafana writes it into a PromQL regex string: a regex that matches the value
    alone, backslashes doubled once more for the string's own escaping."""
    return REGEX_SPECIAL.sub(lambda m: "\\\\" + m.group(), value.replace("\\", "\\\\\\\\"))


def model_value(dashboard: dict, models: Optional[Sequence[str]] = None) -> str:
    """What Grafana puts for ``$model``: the variable's custom all-value for All (None), one
    chosen name alone, several as ``(a|b)``."""
    if models is None:
        return variable(dashboard)["allValue"]
    escaped = [regex_escaped(name) for name in models]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def with_models(dashboard: dict, models: Optional[Sequence[str]] = None) -> dict:
    """``dashboard`` with ``$model`` in its queries filled in as Grafana would for ``models``
    (None: All)."""
    value = model_value(dashboard, models)
    return {**dashboard, "panels": [
        {**panel, "targets": [{**target, "expr": target["expr"].replace("$" + VARIABLE, value)}
                              for target in panel.get("targets", ())]}
        for panel in dashboard["panels"]]}
