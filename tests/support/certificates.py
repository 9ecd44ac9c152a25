"""Certificates of a test's own CA, for the TLS tests."""

from __future__ import annotations

import datetime
from pathlib import Path

from server.stack import tls

DAY = datetime.timedelta(days=1)


def names(*dns: str, ips=("127.0.0.1",)) -> tls.HostNames:
    import ipaddress
    return tls.HostNames(tuple(dns), tuple(ipaddress.ip_address(a) for a in ips))


def team_certificate(folder: Path, expired: bool = False) -> tuple[Path, Path, Path]:
    """A certificate for 127.0.0.1 from a CA of the test's own: (CA, certificate, key) files."""
    now = tls.now_utc()
    served = names("localhost")
    ca, ca_key = tls.issue_ca(now - 500 * DAY, served)
    # Issued long ago, an expired one is past its end (397 days).
    cert, key = tls.issue_server(ca, ca_key, served, now - (400 if expired else 0) * DAY)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "team-ca.pem").write_bytes(tls.cert_pem(ca))
    (folder / "team.crt").write_bytes(tls.cert_pem(cert))
    (folder / "team.key").write_bytes(tls.key_pem(key))
    return folder / "team-ca.pem", folder / "team.crt", folder / "team.key"
