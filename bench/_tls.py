"""A private CA and the certificates of the simulated web's addresses (bench/broad.py --https).

``make_certs(DIR, hosts)`` writes ``ca.pem`` (the CA: give it to a crawler as its CA bundle),
``leaf.key`` and one ``block-B.pem`` per 250 addresses (``_broad_server.address``: 127.10.B.1-250)
naming every address of its block (IP SANs: clients send no SNI for an IP), with the openssl
command line. EC P-256 keys, as most of the web now serves.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def make_certs(directory: Path, hosts: int) -> Path:
    """The CA's file; the rest beside it in ``directory``."""
    if shutil.which("openssl") is None:
        raise SystemExit("--https needs the openssl command")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    run("req", "-x509", *EC, "-keyout", "ca.key", "-out", "ca.pem", "-days", "3",
        "-subj", "/CN=bench broad CA", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    run("req", *EC, "-keyout", "leaf.key", "-out", "leaf.csr", "-subj", "/CN=bench web")
    for b in range((hosts + 249) // 250):
        last = min(250, hosts - 250 * b)
        ips = ",".join(f"IP:127.10.{b}.{j}" for j in range(1, last + 1))
        (directory / f"block-{b}.cnf").write_text(
            f"subjectAltName={ips}\nbasicConstraints=CA:FALSE\n"
            "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
        )
        run("x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-set_serial", str(1000 + b), "-out", f"block-{b}.pem", "-days", "3",
            "-extfile", f"block-{b}.cnf")  # fmt: skip
    return directory / "ca.pem"
