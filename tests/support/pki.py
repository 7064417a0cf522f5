"""A throwaway PKI made with the ``openssl`` command, for TLS tests.

``make_pki(directory)`` writes ``ca.pem``/``ca.key``, ``server.pem``/``server.key``
(SAN IP:127.0.0.1, DNS:localhost) and ``client.pem``/``client.key``, all
signed by the CA and valid for a day.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

__all__ = ["HAVE_OPENSSL", "make_pki"]

HAVE_OPENSSL = shutil.which("openssl") is not None


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_pki(directory: Path) -> Path:
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=PocketMQ test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        cwd=directory,
    )
    (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("server", "client"):
        _openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            f"/CN={name}",
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            cwd=directory,
        )
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            "san.ext",
            "-out",
            f"{name}.pem",
            cwd=directory,
        )
    return directory
