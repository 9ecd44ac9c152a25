"""Prometheus figures read from a server's /metrics."""

from __future__ import annotations

import httpx

from server import tls_contexts


def metric(base_url: str, name: str, **labels: str) -> float:
    """Sum of a Prometheus series over the label sets that match ``labels``, from /metrics."""
    return metric_from_text(httpx.get(f"{base_url}/metrics", timeout=5,
                                      verify=tls_contexts.shared()).text, name, **labels)


async def metric_async(base_url: str, name: str, timeout_s: float = 5, **labels: str) -> float:
    async with httpx.AsyncClient(timeout=timeout_s, verify=tls_contexts.shared()) as http:
        return metric_from_text((await http.get(f"{base_url}/metrics")).text, name, **labels)


def metric_from_text(body: str, name: str, **labels: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families
    total, seen = 0.0, False
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
                seen = True
    if not seen:
        raise KeyError(f"{name} {labels or ''} not in /metrics")
    return total
