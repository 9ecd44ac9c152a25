"""A real Prometheus scraping a stack, and the dashboard's vLLM queries."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import httpx

from server.settings import Settings
from server.stack import dashboard as dashboard_file
from server.stack import scrape_config
from server.stack.processes import free_port
from tests.support.stack_process import Up

VLLM_SELECTOR = re.compile(r"vllm:\w+(\{[^}]*\})?")
AGGREGATION = re.compile(r"\b(?:sum|max|min|avg) (?:by \(([^)]*)\) )?\(")


def vllm_queries(models: Optional[list[str]] = None) -> list[dict]:
    """The vLLM panels' targets, ``$model`` filled in as Grafana does for ``models`` (None: All)."""
    shown = dashboard_file.with_models(dashboard_file.load(), models)
    return [target for panel in shown["panels"] for target in panel["targets"] if "vllm:" in target["expr"]]


class Prometheus:
    def __init__(self, tmp: Path, config: str):
        binary = shutil.which("prometheus") or "/usr/bin/prometheus"
        if not Path(binary).exists():
            raise RuntimeError("Prometheus is not installed: apt-get install prometheus "
                               "(./scripts/test does it)")
        (tmp / "prometheus.yml").write_text(config)
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log = (tmp / "prometheus.log").open("w")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
             f"--web.listen-address={self.url.removeprefix('http://')}"],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.wait_for(lambda: httpx.get(self.url + "/-/ready").status_code == 200, "ready")

    def wait_for(self, check, what: str, timeout_s: float = 60):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"Prometheus exited: {Path(self.log.name).read_text()[-2000:]}"
            try:
                if check():
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise AssertionError(f"Prometheus: not {what} in {timeout_s} s")

    def query(self, promql: str) -> dict:
        answer = httpx.get(self.url + "/api/v1/query", params={"query": promql}, timeout=10).json()
        assert answer["status"] == "success", (promql, answer)
        return answer["data"]

    def value(self, promql: str):
        """The single value of an instant query, None when it has no series."""
        result = self.query(promql)["result"]
        return float(result[0]["value"][1]) if result else None

    def reaches(self, promql: str, wanted: float, timeout_s: float = 30) -> None:
        self.wait_for(lambda: self.value(promql) == wanted, f"{promql} == {wanted} "
                      f"(last: {self.value(promql)})", timeout_s)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()

    def label_values(self, label: str, metric: str) -> list[str]:
        """Grafana's ``label_values(metric, label)``, as its Prometheus source asks for it."""
        answer = httpx.get(f"{self.url}/api/v1/label/{label}/values", params={"match[]": metric},
                           timeout=10).json()
        assert answer["status"] == "success", answer
        return answer["data"]


def scraped_by_prometheus(up: Up, scraped: Settings, tmp: Path):
    """``up`` once it serves, with Prometheus scraping it every second with the repository's
    scrape config for ``scraped``; yields (up, Prometheus, the served names); stops both."""
    prometheus = None
    try:
        up.wait_for("Press Ctrl-C", timeout_s=900)
        prometheus = Prometheus(tmp, scrape_config.render(scraped, interval_s=1))
        yield up, prometheus, [model.served_name for model in scraped.served_models]
    finally:
        if prometheus:
            prometheus.stop()
        up.stop()


def models_shown(prom: Prometheus, expr: str) -> list[Optional[str]]:
    """The ``model`` of each series the query answers with a figure (NaN: none yet)."""
    return sorted((r["metric"].get("model") for r in prom.query(expr)["result"] if r["value"][1] != "NaN"),
                  key=str)


def drawn(prom: Prometheus, png: Path, *args: str) -> tuple[int, int]:
    """benchmarks/monitoring/dashboard_png.py's picture of the last 3 minutes: (panels, series)."""
    done = subprocess.run([sys.executable, "benchmarks/monitoring/dashboard_png.py", "--prometheus", prom.url,
                           "--minutes", "3", "--out", str(png), *args], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    panels, series = (int(w) for w in done.stdout.split(": ")[1].split()[::2])
    return panels, series


def assert_vllm_panels_show_each_model(prom: Prometheus, served: list[str]) -> None:
    """Every vLLM query of the dashboard, ``$model`` filled in as Grafana does: All, all the
    names and each name alone show one series per chosen model; a name no engine serves, or
    one the chosen name's regex would match unescaped, shows nothing."""
    metric, label = re.fullmatch(r"label_values\((.+), (\w+)\)",
                                 dashboard_file.variable(dashboard_file.load())["query"]).groups()
    assert sorted(prom.label_values(label, metric)) == sorted(served)
    for chosen, expected in [(None, served), (served, served), *(([name], [name]) for name in served)]:
        for target in vllm_queries(chosen):
            deadline = time.monotonic() + 30  # a rate needs two scrapes after the requests
            while (shown := models_shown(prom, target["expr"])) != sorted(expected):
                assert time.monotonic() < deadline, (chosen, target["expr"], shown)
                time.sleep(0.5)
    for other in ["another-model", *(name[:-1] + "." for name in served)]:
        for target in vllm_queries([other]):
            assert prom.query(target["expr"])["result"] == [], target["expr"]
