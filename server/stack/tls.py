"""The chat's TLS certificate: the team's, checked, or one of a local CA made here.

HAProxy terminates TLS (server/stack/balancer.py) and reads one PEM file with the
chain and the key (its ``crt``).  A given certificate and key are checked before
anything starts (readable, a certificate and an unencrypted key that belong together,
valid now), since HAProxy's own refusal of them is terse and comes later.

Without one, an exposed chat gets a certificate of a small CA made at the first start:
browsers and clients can trust that CA's file once (it is printed at every start), and
the server certificate can change under it (renewal) without their trusting anything
again.  The CA may vouch only for this machine's names and addresses (name constraints,
critical): whoever reads its key can issue a certificate that clients trusting it accept for
this machine, and for no other site.  So a machine that gains a name or an address gets a
new CA, to be trusted again, as does a CA made before it had constraints.  The server
certificate is renewed a month before it expires, the CA too (it lasts ten years).
Everything is kept in ``.cache/tls/`` with mode 0600 (the keys are secrets; the CA's
certificate is what users copy).
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from server.errors import ErnieChatError
from server.private_files import DIR_MODE, write_private
from server.settings import Settings, app_exposed

CA_DAYS = 3650
SERVER_DAYS = 397  # what public CAs may issue: no client balks at the length
RENEW_BEFORE = datetime.timedelta(days=30)
CA_NAME = "ernie-chat local CA"
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class TlsError(ErnieChatError):
    """The chat's certificate or key cannot be used."""


@dataclass(frozen=True)
class ChatCertificate:
    pem: Path                      # chain and key: HAProxy's crt
    subject: str
    not_after: datetime.datetime
    ca: Optional[Path] = None      # the local CA's certificate, for a certificate made here
    new_ca: bool = False           # that CA was made at this start: clients must trust it again


@dataclass(frozen=True)
class HostNames:
    """What clients may type to reach the chat: the certificate's subject alternative names."""

    dns: tuple[str, ...]
    ips: tuple[Address, ...]

    def covered_by(self, cert: x509.Certificate) -> bool:
        try:
            names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        except x509.ExtensionNotFound:
            return False
        return (set(self.dns) <= set(names.get_values_for_type(x509.DNSName))
                and set(self.ips) <= set(names.get_values_for_type(x509.IPAddress)))

    def constraints(self) -> x509.NameConstraints:
        """A CA limited to these names (and their subdomains) and exactly these addresses."""
        return x509.NameConstraints(
            permitted_subtrees=[x509.DNSName(n) for n in self.dns]
            + [x509.IPAddress(ipaddress.ip_network(a)) for a in self.ips],
            excluded_subtrees=None)

    def permitted_by(self, ca: x509.Certificate) -> bool:
        """Whether ``ca`` may vouch for every name and address here: not a CA without name
        constraints, which may vouch for any site."""
        try:
            limits = ca.extensions.get_extension_for_class(x509.NameConstraints).value
        except x509.ExtensionNotFound:
            return False
        permitted = limits.permitted_subtrees or []
        return (set(self.dns) <= {n.value for n in permitted if isinstance(n, x509.DNSName)}
                and {ipaddress.ip_network(a) for a in self.ips}
                <= {n.value for n in permitted if isinstance(n, x509.IPAddress)})


def now_utc() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


# --- the team's certificate --------------------------------------------------------------

def read_pem(path: Path, setting: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise TlsError(f"{setting}={path} cannot be read: {exc.strerror}") from None


def load_key(pem: bytes, where: str):
    try:
        return serialization.load_pem_private_key(pem, password=None)
    except TypeError:
        raise TlsError(f"the private key in {where} is encrypted; HAProxy needs it unencrypted "
                       f"(`openssl pkey -in {where} -out chat.key` asks for the passphrase once), "
                       "in a file only you can read") from None
    except ValueError as exc:
        raise TlsError(f"{where} holds no usable private key ({exc})") from None


def has_key(pem: bytes) -> bool:
    return b"PRIVATE KEY-----" in pem


def certificate_problem(cert: x509.Certificate, key, when: datetime.datetime) -> Optional[str]:
    """Why ``cert`` with ``key`` cannot serve at ``when``, or None (pure)."""
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    if (cert.public_key().public_bytes(serialization.Encoding.DER, spki)
            != key.public_key().public_bytes(serialization.Encoding.DER, spki)):
        return "the private key does not belong to the certificate (its public key differs)"
    if cert.not_valid_after_utc < when:
        return f"the certificate expired on {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC: renew it"
    if cert.not_valid_before_utc > when:
        return f"the certificate is valid only from {cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC"
    return None


def given_certificate(cert_path: Path, key_path: Optional[Path], folder: Path,
                      when: Optional[datetime.datetime] = None) -> ChatCertificate:
    """The team's certificate (and key), checked, copied with its key into one PEM for HAProxy."""
    cert_pem = read_pem(cert_path, "ERNIE_TLS_CERT")
    try:
        chain = x509.load_pem_x509_certificates(cert_pem)
    except ValueError:
        raise TlsError(f"ERNIE_TLS_CERT={cert_path} holds no PEM certificate "
                       "(-----BEGIN CERTIFICATE-----)") from None
    if key_path is not None:
        key_pem, key_where = read_pem(key_path, "ERNIE_TLS_KEY"), str(key_path)
    elif has_key(cert_pem):
        key_pem, key_where = cert_pem, str(cert_path)
    else:
        raise TlsError(f"ERNIE_TLS_CERT={cert_path} holds no private key: set ERNIE_TLS_KEY to the "
                       "key's PEM file, or append the key to the certificate's file")
    if problem := certificate_problem(chain[0], load_key(key_pem, key_where), when or now_utc()):
        raise TlsError(f"ERNIE_TLS_CERT={cert_path}: {problem}")
    pem = write_pem(folder / "chat.pem", cert_pem if key_path is None
                    else cert_pem.rstrip(b"\n") + b"\n" + key_pem)
    return ChatCertificate(pem, chain[0].subject.rfc4514_string(), chain[0].not_valid_after_utc)


def write_pem(path: Path, pem: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.parent.chmod(DIR_MODE)
    write_private(path, pem.decode("ascii"))
    return path


# --- a certificate of a local CA ----------------------------------------------------------

def host_names(bind_host: str) -> HostNames:
    """The names and addresses this machine is reached by: all of them for a wildcard bind."""
    dns = {"localhost", socket.gethostname(), socket.getfqdn()}
    ips: set[Address] = {ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")}
    try:
        ips.add(ipaddress.ip_address(bind_host))
    except ValueError:
        dns.add(bind_host)
    if bind_host in ("0.0.0.0", "::", ""):
        ips |= machine_addresses()
    ips -= {ipaddress.ip_address("0.0.0.0"), ipaddress.ip_address("::")}
    return HostNames(tuple(sorted(n.lower() for n in dns if n)),
                     tuple(sorted(ips, key=lambda a: (a.version, int(a)))))


def machine_addresses() -> set[Address]:
    found: set[Address] = set()
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None):
            found.add(ipaddress.ip_address(info[4][0].split("%")[0]))
    except OSError:
        pass
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the route's address
            found.add(ipaddress.ip_address(probe.getsockname()[0]))
        except OSError:
            pass
    return found


def fresh(cert: x509.Certificate, when: datetime.datetime) -> bool:
    return cert.not_valid_before_utc <= when and cert.not_valid_after_utc - RENEW_BEFORE > when


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def issue_ca(when: datetime.datetime, names: HostNames) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{CA_NAME} ({socket.gethostname()})")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(when - datetime.timedelta(minutes=5))
            .not_valid_after(when + datetime.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=True, crl_sign=True,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(names.constraints(), critical=True)
            .sign(key, hashes.SHA256()))
    return cert, key


def issue_server(ca: x509.Certificate, ca_key, names: HostNames,
                 when: datetime.datetime) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = new_key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names.dns[0])])
    alt = [x509.DNSName(n) for n in names.dns] + [x509.IPAddress(a) for a in names.ips]
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(when - datetime.timedelta(minutes=5))
            .not_valid_after(min(when + datetime.timedelta(days=SERVER_DAYS), ca.not_valid_after_utc))
            .add_extension(x509.SubjectAlternativeName(alt), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    return cert, key


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def load_kept(cert_path: Path, key_path: Path):
    """A certificate and key kept here earlier, or None when either is missing or damaged."""
    try:
        return (x509.load_pem_x509_certificate(cert_path.read_bytes()),
                serialization.load_pem_private_key(key_path.read_bytes(), password=None))
    except (OSError, ValueError, TypeError):
        return None


def local_ca(folder: Path, names: HostNames, when: datetime.datetime):
    """The CA kept in ``folder``, or a new one when there is none, it runs out, or it may not
    vouch for every one of ``names`` (or for no name in particular: made without constraints)."""
    kept = load_kept(folder / "ca.pem", folder / "ca-key.pem")
    if kept and fresh(kept[0], when) and names.permitted_by(kept[0]):
        return kept + (False,)
    cert, key = issue_ca(when, names)
    write_pem(folder / "ca-key.pem", key_pem(key))
    write_pem(folder / "ca.pem", cert_pem(cert))
    return cert, key, True


def self_signed(folder: Path, names: HostNames,
                when: Optional[datetime.datetime] = None) -> ChatCertificate:
    """A server certificate of the local CA in ``folder`` for ``names``: the one kept there
    while it is fresh, of that CA and covers the names; else a new one."""
    when = when or now_utc()
    ca, ca_key, new_ca = local_ca(folder, names, when)
    kept = load_kept(folder / "server.pem", folder / "server-key.pem")
    if (new_ca or not kept or not fresh(kept[0], when) or kept[0].issuer != ca.subject
            or not names.covered_by(kept[0])):
        kept = issue_server(ca, ca_key, names, when)
        write_pem(folder / "server-key.pem", key_pem(kept[1]))
        write_pem(folder / "server.pem", cert_pem(kept[0]))
    cert, key = kept
    pem = write_pem(folder / "chat.pem", cert_pem(cert) + key_pem(key))
    return ChatCertificate(pem, cert.subject.rfc4514_string(), cert.not_valid_after_utc, folder / "ca.pem",
                           new_ca)


def fingerprint(pem_path: Path) -> str:
    """SHA-256 of a certificate, as browsers show it, to compare a copied CA file with."""
    digest = hashlib.sha256(x509.load_pem_x509_certificate(pem_path.read_bytes())
                            .public_bytes(serialization.Encoding.DER)).hexdigest().upper()
    return ":".join(digest[i:i + 2] for i in range(0, len(digest), 2))


def notice(settings: Settings, cert: Optional[ChatCertificate]) -> Optional[str]:
    """What `up` says of the chat's encryption: plain HTTP on a network is a warning; a
    certificate made here comes with how to trust or replace it."""
    url, port = settings.app_url, settings.app_port
    if cert is None:
        return None if not app_exposed(settings) else "\n".join([
            "[security] " + "!" * 70,
            f"[security] WARNING: the chat listens on {settings.app_host}:{port} over plain HTTP "
            "(ERNIE_TLS=off).",
            "[security] Login passwords and session cookies cross the network UNENCRYPTED: anyone",
            "[security] on the way can read them and take over a session.",
            "[security] Unset ERNIE_TLS to serve HTTPS here, or set ERNIE_APP_HOST=127.0.0.1 and let",
            "[security] a proxy with a certificate (Caddy: `caddy reverse-proxy --from chat.example.org",
            f"[security] --to 127.0.0.1:{port}`; nginx) take the network side.",
            "[security] " + "!" * 70])
    if cert.ca is None:
        return (f"[security] The chat serves HTTPS at {url} with ERNIE_TLS_CERT ({cert.subject}, "
                f"valid until {cert.not_after:%Y-%m-%d}); plain http:// on port {port} redirects there.")
    return "\n".join([
        "[security] " + "!" * 70,
        f"[security] The chat serves HTTPS at {url} with a certificate of a local CA made on this",
        "[security] machine: browsers warn about it until they trust that CA. The CA's certificate:",
        f"[security]   {cert.ca}",
        f"[security]   SHA-256 {fingerprint(cert.ca)}",
        *(["[security] This CA is new: a client that trusted an earlier one must trust this file",
           "[security] instead (and may remove the earlier one)."] if cert.new_ca else []),
        "[security] It may vouch only for this machine's names and addresses (name constraints).",
        "[security] Trust it in each user's browser (Settings, Certificates, Authorities: import),",
        f"[security] not system-wide; for scripts: curl --cacert {cert.ca.name} {url}",
        "[security] Or replace it with your team's certificate: ERNIE_TLS_CERT=<PEM of the",
        "[security] certificate and its chain> ERNIE_TLS_KEY=<PEM of its key>, and start again.",
        f"[security] Plain http:// on port {port} redirects to https://.",
        "[security] " + "!" * 70])


def prepare(settings: Settings, folder: Path) -> Optional[ChatCertificate]:
    """The chat's certificate as the settings ask (None: plain HTTP)."""
    if not settings.chat_tls:
        return None
    if settings.tls_cert is not None:
        return given_certificate(settings.tls_cert, settings.tls_key, folder)
    return self_signed(folder, host_names(settings.app_host))
