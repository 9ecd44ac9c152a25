"""HTTPS for the chat without a server: the settings, the plan, the team's certificate checked
before anything starts, and the certificate made here."""

from __future__ import annotations

import datetime
import ipaddress
import stat

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509 import verification
from cryptography.x509.oid import NameOID

from server.settings import load_settings
from server.stack import balancer, tls
from server.stack.balancer import STICKY_COOKIE
from server.stack.supervisor import Stack
from server.stack.topology import balancer_config, plan_topology
from tests.support.certificates import DAY, names, team_certificate
NOW = datetime.datetime(2026, 6, 1, tzinfo=datetime.timezone.utc)


# --- settings and the plan (pure) -----------------------------------------------------

@pytest.mark.usefixtures("clean_env")
def test_exposed_chat_is_https_and_loopback_stays_plain():
    exposed = load_settings(app_host="0.0.0.0", open_chat=True, app_port=8080)
    assert exposed.chat_tls and exposed.app_url == "https://127.0.0.1:8080"
    assert not load_settings().chat_tls and load_settings().app_url.startswith("http://")
    assert load_settings(tls_cert="/x.pem").chat_tls  # given: on loopback too
    assert not load_settings(app_host="0.0.0.0", open_chat=True, tls="off").chat_tls


@pytest.mark.usefixtures("clean_env")
def test_contradicting_tls_settings_are_refused():
    with pytest.raises(Exception, match="ERNIE_TLS_KEY is set without ERNIE_TLS_CERT"):
        load_settings(tls_key="/k.pem")
    with pytest.raises(Exception, match="ERNIE_TLS=off and ERNIE_TLS_CERT contradict"):
        load_settings(tls="off", tls_cert="/c.pem")


@pytest.mark.usefixtures("clean_env")
def test_one_https_worker_is_behind_haproxy_with_secure_cookies():
    s = load_settings(tls_cert="/x.pem", app_workers=1)
    topology = plan_topology(s, "cpu", 2, iter(range(9000, 9100)).__next__)
    assert topology.balanced_app and topology.worker_ports != (s.app_port,)
    text = balancer.render_haproxy(balancer_config(topology, s, tls_pem="/c/chat.pem"))
    assert f"bind 127.0.0.1:{s.app_port}\n" in text and "crt /c/chat.pem" in text
    assert "redirect scheme https code 308" in text
    assert "X-Forwarded-Proto https" in text and "Strict-Transport-Security" in text
    assert f"cookie {STICKY_COOKIE} insert indirect nocache httponly secure" in text
    plain = balancer.render_haproxy(balancer_config(topology, s))
    assert "ssl" not in plain and "Secure" not in plain and "secure" not in plain


# --- the team's certificate: checked before anything starts ----------------------------

def test_given_certificate_and_key_are_used_as_given(tmp_path):
    _, cert, key = team_certificate(tmp_path)
    got = tls.given_certificate(cert, key, tmp_path / "out")
    assert got.pem.read_bytes() == cert.read_bytes() + key.read_bytes()
    assert stat.S_IMODE(got.pem.stat().st_mode) == 0o600 and got.ca is None
    both = tmp_path / "both.pem"  # HAProxy's own crt form: certificate and key in one file
    both.write_bytes(cert.read_bytes() + key.read_bytes())
    assert tls.given_certificate(both, None, tmp_path / "out2").pem.read_bytes() == both.read_bytes()


def test_bad_certificates_get_clear_errors(tmp_path):
    _, cert, key = team_certificate(tmp_path / "a")
    _, _, other_key = team_certificate(tmp_path / "b")
    _, expired, expired_key = team_certificate(tmp_path / "c", expired=True)
    out = tmp_path / "out"
    cases = [
        ((cert, other_key), "does not belong to the certificate"),
        ((tmp_path / "missing.crt", key), r"ERNIE_TLS_CERT=.*missing.crt cannot be read: No such file"),
        ((cert, tmp_path), r"ERNIE_TLS_KEY=.* cannot be read: Is a directory"),
        ((expired, expired_key), r"the certificate expired on \d{4}-\d\d-\d\d"),
        ((key, None), "holds no PEM certificate"),
        ((cert, None), "holds no private key: set ERNIE_TLS_KEY"),
    ]
    for (c, k), message in cases:
        with pytest.raises(tls.TlsError, match=message):
            tls.given_certificate(c, k, out)
    encrypted = tmp_path / "encrypted.key"
    encrypted.write_bytes(serialization.load_pem_private_key(key.read_bytes(), None).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret")))
    with pytest.raises(tls.TlsError, match="is encrypted; HAProxy needs it unencrypted"):
        tls.given_certificate(cert, encrypted, out)


@pytest.mark.usefixtures("clean_env")
def test_a_bad_certificate_stops_up_before_anything_starts(tmp_path):
    _, cert, _ = team_certificate(tmp_path / "a")
    _, _, other_key = team_certificate(tmp_path / "b")
    settings = load_settings(tls_cert=cert, tls_key=other_key, engine_url="http://127.0.0.1:9",
                             log_file=tmp_path / "llm.log")
    stack = Stack(settings, root=tmp_path, out=lambda line: None)
    with pytest.raises(tls.TlsError, match="does not belong"):
        stack.start()
    assert stack.apps is None and stack.balancer is None


# --- the certificate made here -----------------------------------------------------------

def test_made_certificate_is_kept_renewed_and_reissued_for_new_names(tmp_path):
    def made(when, *ips: str) -> tuple[bytes, bytes, tls.ChatCertificate]:
        cert = tls.self_signed(tmp_path, names("host", ips=ips or ("127.0.0.1",)), when)
        return cert.ca.read_bytes(), cert.pem.read_bytes(), cert

    ca, pem, first = made(NOW)
    assert first.new_ca
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in tmp_path.iterdir())
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o700
    assert made(NOW + DAY)[:2] == (ca, pem) and not made(NOW + DAY)[2].new_ca  # kept
    # Near its end it is renewed, under the same CA.
    renewed_ca, _, renewed = made(first.not_after - DAY)
    assert renewed.not_after > first.not_after and renewed_ca == ca and not renewed.new_ca
    # A new address of the machine is outside the CA's constraints: a new CA, to trust again.
    moved_ca, moved, moved_cert = made(first.not_after - DAY, "127.0.0.1", "10.1.2.3")
    assert moved != pem and moved_ca != ca and moved_cert.new_ca
    # A CA near its end is replaced, and so is everything it signed.
    end = first.not_after - DAY + tls.CA_DAYS * DAY
    later_ca, _, later = made(end, "127.0.0.1", "10.1.2.3")
    assert later_ca != moved_ca and later.not_after > end and later.new_ca


def verified(ca: x509.Certificate, leaf: x509.Certificate, name: str, when: datetime.datetime) -> bool:
    """Whether a client trusting ``ca`` alone accepts ``leaf`` for ``name`` (RFC 5280 path
    validation, name constraints included: cryptography's verifier)."""
    subject = (verification.IPAddress(ipaddress.ip_address(name)) if name[0].isdigit()
               else verification.DNSName(name))
    verifier = (verification.PolicyBuilder().store(verification.Store([ca])).time(when)
                .build_server_verifier(subject))
    try:
        verifier.verify(leaf, [])
        return True
    except verification.VerificationError:
        return False


def test_the_ca_made_here_vouches_only_for_the_machines_names(tmp_path):
    served = names("host", "localhost", ips=("127.0.0.1", "10.1.2.3"))
    made = tls.self_signed(tmp_path, served, NOW)
    ca = x509.load_pem_x509_certificate(made.ca.read_bytes())
    ca_key = serialization.load_pem_private_key((tmp_path / "ca-key.pem").read_bytes(), None)
    server = x509.load_pem_x509_certificate((tmp_path / "server.pem").read_bytes())
    assert ca.extensions.get_extension_for_class(x509.NameConstraints).critical
    assert all(verified(ca, server, name, NOW) for name in ("host", "localhost", "127.0.0.1", "10.1.2.3"))
    # Whoever reads its key issues a certificate for another site: no client trusting it accepts it.
    for other in (names("intranet.example.com"), names("host", ips=("10.9.9.9",))):
        forged, _ = tls.issue_server(ca, ca_key, other, NOW)
        assert not verified(ca, forged, other.dns[0] if other.dns[0] != "host" else "10.9.9.9", NOW), other
    # A name under one of its names is the machine's to give: allowed, as RFC 5280 reads it.
    sub, _ = tls.issue_server(ca, ca_key, names("chat.host"), NOW)
    assert verified(ca, sub, "chat.host", NOW)


def test_a_ca_made_without_constraints_is_replaced(tmp_path):
    served = names("host")
    key = tls.new_key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "an earlier version's CA")])
    unbounded = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                 .public_key(key.public_key()).serial_number(1)
                 .not_valid_before(NOW - DAY).not_valid_after(NOW + 3000 * DAY)
                 .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                 .sign(key, hashes.SHA256()))
    tls.write_pem(tmp_path / "ca.pem", tls.cert_pem(unbounded))
    tls.write_pem(tmp_path / "ca-key.pem", tls.key_pem(key))
    made = tls.self_signed(tmp_path, served, NOW)
    assert made.new_ca and made.ca.read_bytes() != tls.cert_pem(unbounded)
    assert served.permitted_by(x509.load_pem_x509_certificate(made.ca.read_bytes()))


def test_made_certificate_names_the_bind_host_and_the_machine():
    found = tls.host_names("0.0.0.0")
    assert "localhost" in found.dns and str(found.ips[0]) == "127.0.0.1"
    assert "0.0.0.0" not in map(str, found.ips)
    assert "10.9.8.7" in map(str, tls.host_names("10.9.8.7").ips)
    assert "chat.example.org" in tls.host_names("chat.example.org").dns


@pytest.mark.usefixtures("clean_env")
def test_start_says_where_the_ca_is_and_how_to_replace_it(tmp_path):
    settings = load_settings(app_host="0.0.0.0", open_chat=True)
    made = tls.prepare(settings, tmp_path)
    text = tls.notice(settings, made)
    assert str(made.ca) in text and tls.fingerprint(made.ca) in text
    assert "This CA is new" in text and "name constraints" in text and "update-ca-certificates" not in text
    assert "This CA is new" not in tls.notice(settings, tls.prepare(settings, tmp_path))  # kept
    assert "ERNIE_TLS_CERT=" in text and "ERNIE_TLS_KEY=" in text and "https://127.0.0.1:8080" in text
    plain = tls.notice(load_settings(app_host="0.0.0.0", open_chat=True, tls="off"), None)
    assert "UNENCRYPTED" in plain
    assert tls.notice(load_settings(), None) is None  # loopback, plain: nothing to say
