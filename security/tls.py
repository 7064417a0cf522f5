"""TLS for the servers: gRPC server credentials from PEM files.

``tls_cert_file`` and ``tls_key_file`` turn TLS on; with ``tls_ca_file`` and
``tls_require_client_auth`` the server also requires client certificates
signed by that CA. Clients give the CA that signed the server's certificate
(``tls_ca_file``) and, when required, their own certificate and key.
"""

from __future__ import annotations

import grpc

from pocketmq.common.errors import ConfigError

__all__ = ["server_credentials"]


def _read(path: str, key: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise ConfigError(f"{key}: cannot read {path}: {exc.strerror}") from None


def server_credentials(
    cert_file: str, key_file: str, ca_file: str = "", require_client_auth: bool = False
) -> grpc.ServerCredentials:
    if require_client_auth and not ca_file:
        raise ConfigError(
            "tls_require_client_auth needs tls_ca_file: the CA that signs the clients' certificates"
        )
    root = _read(ca_file, "tls_ca_file") if ca_file else None
    return grpc.ssl_server_credentials(
        [(_read(key_file, "tls_key_file"), _read(cert_file, "tls_cert_file"))],
        root_certificates=root,
        require_client_auth=require_client_auth,
    )
