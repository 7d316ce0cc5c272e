"""Throwaway keys and certificates for the push fakes, generated on the spot (never checked in).

    material = TestKeys.create(directory)   # a CA, a localhost server certificate, and each provider's keys
    material.ca_file                         # what a backend's `ca_file` option points at

Everything here is for tests, `make run` and the chaos run: real key types and real file formats
(a Google service-account JSON, an Apple `.p8` key, a VAPID PEM), so the backends read them exactly as
they would read production ones.
"""

import base64
import datetime as dt
import ipaddress
import json
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

FCM_PROJECT_ID = "weave-fake-project"
FCM_CLIENT_EMAIL = "weave-push@weave-fake-project.iam.gserviceaccount.com"
APNS_TEAM_ID = "WEAVETEAM1"
APNS_KEY_ID = "WEAVEKEY01"
APNS_TOPIC = "com.example.weave"


def b64url(raw: bytes) -> str:
    """Return unpadded URL-safe base64, the encoding Web Push keys travel in."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _pem_private(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    os.chmod(path, 0o600)  # key material: readable by its owner only, like a real secret
    return path


@dataclass(frozen=True)
class TestKeys:
    """Paths of the generated files, and the public halves the fakes verify signatures with."""

    __test__ = False  # not a pytest test class, despite the name

    directory: Path
    ca_file: Path  # the CA that signed the fakes' server certificate
    server_cert: Path
    server_key: Path
    fcm_service_account: Path  # a service-account JSON whose token_uri the caller fills in
    fcm_public_key_pem: bytes
    apns_key_file: Path  # an Apple-style .p8 (PKCS#8 EC P-256)
    apns_public_key_pem: bytes
    vapid_private_key_file: Path
    vapid_public_key_pem: bytes

    @classmethod
    def create(cls, directory: Path | str, *, token_uri: str = "https://oauth2.googleapis.com/token") -> "TestKeys":
        """Generate everything into `directory` (created if missing)."""
        root = Path(directory)
        root.mkdir(parents=True, exist_ok=True)
        ca_file, cert, key = _tls(root)
        fcm_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        account = _write(root / "fcm-service-account.json", _service_account(fcm_key, token_uri).encode())
        apns_key = ec.generate_private_key(ec.SECP256R1())
        vapid_key = ec.generate_private_key(ec.SECP256R1())
        return cls(
            directory=root,
            ca_file=ca_file,
            server_cert=cert,
            server_key=key,
            fcm_service_account=account,
            fcm_public_key_pem=_public_pem(fcm_key),
            apns_key_file=_write(root / f"AuthKey_{APNS_KEY_ID}.p8", _pem_private(apns_key)),
            apns_public_key_pem=_public_pem(apns_key),
            vapid_private_key_file=_write(root / "vapid-private.pem", _pem_private(vapid_key)),
            vapid_public_key_pem=_public_pem(vapid_key),
        )

    def set_token_uri(self, token_uri: str) -> None:
        """Point the service-account file at a (fake) token endpoint, as `token_uri` does in real files."""
        info = json.loads(self.fcm_service_account.read_text())
        info["token_uri"] = token_uri
        _write(self.fcm_service_account, json.dumps(info, indent=2).encode())


def _public_pem(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def _service_account(key: rsa.RSAPrivateKey, token_uri: str) -> str:
    # The fields google-auth reads from a real service-account file (the others are informative).
    return json.dumps(
        {
            "type": "service_account",
            "project_id": FCM_PROJECT_ID,
            "private_key_id": "0123456789abcdef0123456789abcdef01234567",
            "private_key": _pem_private(key).decode(),
            "client_email": FCM_CLIENT_EMAIL,
            "client_id": "100000000000000000001",
            "auth_uri": "https://accounts.google.com/o/oauth2/auth",
            "token_uri": token_uri,
        },
        indent=2,
    )


def _tls(root: Path) -> tuple[Path, Path, Path]:
    """A self-signed CA and a server certificate for localhost / 127.0.0.1 / ::1 signed by it."""
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Weave test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("localhost"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    x509.IPAddress(ipaddress.ip_address("::1")),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_file = root / "ca.pem"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_file = root / "server.pem"
    cert_file.write_bytes(server.public_bytes(serialization.Encoding.PEM))
    key_file = _write(root / "server-key.pem", _pem_private(server_key))
    return ca_file, cert_file, key_file


@dataclass(frozen=True)
class WebPushSubscription:
    """A browser's push subscription as a site stores it, plus the private half only the browser holds."""

    endpoint: str
    p256dh: str  # the subscriber's public key, uncompressed point, base64url
    auth: str  # the 16-byte auth secret, base64url
    private_key: ec.EllipticCurvePrivateKey

    @classmethod
    def create(cls, endpoint: str) -> "WebPushSubscription":
        key = ec.generate_private_key(ec.SECP256R1())
        point = key.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
        return cls(endpoint=endpoint, p256dh=b64url(point), auth=b64url(os.urandom(16)), private_key=key)

    def as_token(self) -> str:
        """Return the subscription JSON a site registers as the device token (PushSubscription.toJSON())."""
        return json.dumps({"endpoint": self.endpoint, "keys": {"p256dh": self.p256dh, "auth": self.auth}})
