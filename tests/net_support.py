"""What the network tests start on this machine: upstream servers, their names, tools.

Everything a box is allowed to reach in a test is one of these: containers on a
network the test creates with `internal: true` (no route off the host), serving HTTP
(80), HTTPS (443, a certificate the test made) and DNS (53/udp, names the test
chose). The egress proxy joins only that network, so no packet of a test can leave
the machine, whatever the policy says.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import io
import json
import os
import shutil
import subprocess
import tempfile
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

UPSTREAM = r"""
import http.server, json, os, socket, ssl, struct, sys, threading

root, name = sys.argv[1], sys.argv[2]
# HTTP, HTTPS and DNS ports (80,443,53 where the server may bind low ports; a pod may not).
PORTS = [int(p) for p in (sys.argv[3] if len(sys.argv) > 3 else "80,443,53").split(",")]

def load_names():
    try:
        with open(os.path.join(root, "dns.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}

class Handler(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def __init__(self, *a, **k):
        super().__init__(*a, directory=os.path.join(root, "www"), **k)
    def do_GET(self):
        if self.path.startswith("/whoami"):
            body = json.dumps({"server": name, "host": self.headers.get("Host")}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if self.path.startswith("/stream"):
            self.send_response(200)
            self.send_header("Content-Length", "1000000000")
            self.end_headers()
            try:
                while True:
                    self.wfile.write(b"x" * 1024)
                    self.wfile.flush()
                    __import__("time").sleep(0.05)
            except OSError:
                return
        super().do_GET()
    def log_message(self, *a):
        pass

def serve(port, tls):
    server = http.server.ThreadingHTTPServer(("0.0.0.0", port), Handler)
    if tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(os.path.join(root, "cert.pem"), os.path.join(root, "key.pem"))
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    server.serve_forever()

def dns(port):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("0.0.0.0", port))
    while True:
        data, peer = sock.recvfrom(512)
        try:
            pos, labels = 12, []
            while data[pos]:
                labels.append(data[pos + 1 : pos + 1 + data[pos]].decode().lower())
                pos += 1 + data[pos]
            qtype = struct.unpack(">H", data[pos + 1 : pos + 3])[0]
            question = data[12 : pos + 5]
            host = ".".join(labels)
            answer = load_names().get(host)
            flags, count, rr = 0x8180, 0, b""
            if answer is None:
                flags = 0x8183
            elif qtype == 1:
                count = 1
                rr = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 5, 4) + socket.inet_aton(answer)
            reply = data[:2] + struct.pack(">HHHHH", flags, 1, count, 0, 0) + question + rr
            sock.sendto(reply, peer)
        except Exception:
            continue

for target in ((serve, (PORTS[0], False)), (serve, (PORTS[1], True)), (dns, (PORTS[2],))):
    threading.Thread(target=target[0], args=target[1], daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
"""


# In a box: GET argv[1] (an upstream's endless /stream), say "open", then read until the
# connection ends ("ended") or is cut ("cut <error>"): a download kept open while a test
# takes the box's policy away.
STREAM_DOWNLOAD = """
import sys, urllib.request
r = urllib.request.urlopen(sys.argv[1], timeout=60)
print('open', flush=True)
try:
    while r.read(1024): pass
    print('ended')
except Exception as e:
    print('cut', type(e).__name__)
"""


def make_certificate(directory: Path, names: list[str]) -> tuple[Path, Path]:
    """A self-signed certificate for `names` (it is its own CA): cert.pem, key.pem."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    for path in (cert_path, key_path):
        path.chmod(0o644)
    return cert_path, key_path


def make_wheel(directory: Path, name: str = "sktestpkg", version: str = "1.0") -> Path:
    """A tiny pure-Python wheel and a PEP 503 simple index page for it."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": b"VALUE = 42\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: sandkit-test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = "".join(f"{path},,\n" for path in files) + f"{dist}/RECORD,,\n"
    files[f"{dist}/RECORD"] = record.encode()
    wheel_name = f"{name}-{version}-py3-none-any.whl"
    (directory / "files").mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(directory / "files" / wheel_name, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    digest = hashlib.sha256((directory / "files" / wheel_name).read_bytes()).hexdigest()
    index = directory / "simple" / name
    index.mkdir(parents=True, exist_ok=True)
    (index / "index.html").write_text(
        f'<html><body><a href="../../files/{wheel_name}#sha256={digest}">{wheel_name}</a>'
        "</body></html>\n"
    )
    return directory / "files" / wheel_name


def make_git_repo(directory: Path) -> Path | None:
    """A bare repository served by plain HTTP (git's dumb protocol), or None without git."""
    git = shutil.which("git")
    if git is None:
        return None
    work = Path(tempfile.mkdtemp(prefix="sktest-git-"))
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "GIT_CONFIG_NOSYSTEM": "1",
        "HOME": str(work),
    }
    try:
        subprocess.run([git, "init", "-q", "-b", "main", str(work / "src")], check=True, env=env)
        (work / "src" / "README").write_text("hello from the test's repository\n")
        subprocess.run([git, "-C", str(work / "src"), "add", "README"], check=True, env=env)
        subprocess.run([git, "-C", str(work / "src"), "commit", "-qm", "one"], check=True, env=env)
        bare = directory / "repo.git"
        subprocess.run(
            [git, "clone", "-q", "--bare", str(work / "src"), str(bare)], check=True, env=env
        )
        subprocess.run([git, "-C", str(bare), "update-server-info"], check=True, env=env)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for path in [bare, *bare.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return bare


# -- a box image with curl and git: the host's own binaries (same Debian) ---------------

NETTOOLS = ("/usr/bin/curl", "/usr/bin/git", "/usr/lib/git-core/git-remote-http")


def _libraries(binary: str) -> list[str]:
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        parts = line.split("=>")
        path = (parts[1] if len(parts) > 1 else parts[0]).strip().split(" ")[0]
        if path.startswith("/"):
            found.append(path)
    return found


def nettools_image(client: Any, base_image: str) -> str | None:
    """`base_image` plus curl and git copied from this host (built locally, cached by
    content), or None when the host lacks them or is another distribution."""
    if not all(os.path.exists(p) for p in NETTOOLS) or shutil.which("ldd") is None:
        return None
    try:
        os_release = Path("/etc/os-release").read_text()
    except OSError:
        return None
    base_os = client.containers.run(
        base_image, ["cat", "/etc/os-release"], remove=True, network_mode="none"
    ).decode()
    if _field(os_release, "VERSION_CODENAME") != _field(base_os, "VERSION_CODENAME"):
        return None
    paths = set(NETTOOLS)
    for binary in NETTOOLS:
        paths.update(_libraries(binary))
    digest = hashlib.sha256(base_image.encode())
    for path in sorted(paths):
        digest.update(path.encode() + b"\0" + hashlib.sha256(Path(path).read_bytes()).digest())
    tag = f"sandkit-test/nettools:{digest.hexdigest()[:12]}"
    try:
        client.images.get(tag)
        return tag
    except Exception:
        pass
    context = io.BytesIO()
    import tarfile

    with tarfile.open(fileobj=context, mode="w") as tar:
        dockerfile = (
            f"FROM {base_image}\nCOPY rootfs/ /\n"
            "RUN ln -sf git-remote-http /usr/lib/git-core/git-remote-https\n"
        ).encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        tar.addfile(info, io.BytesIO(dockerfile))
        for path in sorted(paths):
            real = os.path.realpath(path)
            tar.add(real, arcname="rootfs" + path, recursive=False)
    context.seek(0)
    client.images.build(fileobj=context, custom_context=True, tag=tag, rm=True, network_mode="none")
    return tag


def _field(text: str, name: str) -> str:
    for line in text.splitlines():
        if line.startswith(name + "="):
            return line.split("=", 1)[1].strip('"')
    return ""


# -- the upstream network ----------------------------------------------------------------


@dataclass
class Upstreams:
    network: str
    ip: str  # pkg.test and dns.test
    other_ip: str  # other.test
    subnet: str
    ca: Path
    root: Path
    git_repo: bool
    containers: list[Any] = field(default_factory=list)

    def hosts(self) -> dict[str, list[str]]:
        """The operator's hosts table the tests configure."""
        return {
            "pkg.test": [self.ip],
            "other.test": [self.other_ip],
            "loop.pkg.test": ["127.0.0.1"],
        }


def start_upstreams(
    client: Any, image: str, prefix: str, labels: dict[str, str], work: Path
) -> Iterator[Upstreams]:
    """The network and its two servers; removed when the generator is closed."""
    work.mkdir(parents=True, exist_ok=True)
    www = work / "www"
    www.mkdir()
    (www / "hello.txt").write_text("hello through the proxy\n")
    make_wheel(www)
    git_repo = make_git_repo(www) is not None
    make_certificate(work, ["pkg.test", "dns.test", "other.test", "alt.pkg.test"])
    (work / "upstream.py").write_text(UPSTREAM)
    for path in [work, *work.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    network = client.networks.create(f"{prefix}-up", driver="bridge", internal=True, labels=labels)
    containers = []
    try:
        for name in ("up", "other"):
            container = client.containers.run(
                image,
                ["python3", "-u", "/srv/upstream.py", "/srv", name],
                name=f"{prefix}-{name}",
                detach=True,
                network=network.name,
                user="1000:1000",
                labels=labels,
                volumes={str(work): {"bind": "/srv", "mode": "ro"}},
                cap_drop=["ALL"],
            )
            containers.append(container)
        ips = []
        for container in containers:
            deadline = time.monotonic() + 60
            while b"ready" not in container.logs():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"upstream {container.name} did not start")
                time.sleep(0.1)
            container.reload()
            ips.append(container.attrs["NetworkSettings"]["Networks"][network.name]["IPAddress"])
        network.reload()
        subnet = network.attrs["IPAM"]["Config"][0]["Subnet"]
        write_dns(
            work,
            {
                "dns.test": ips[0],
                "private.pkg.test": ips[0],
                "other-dns.test": ips[1],
                "rebind.pkg.test": "127.0.0.1",
            },
        )
        yield Upstreams(
            network.name, ips[0], ips[1], subnet, work / "cert.pem", work, git_repo, containers
        )
    finally:
        for container in containers:
            with contextlib.suppress(Exception):
                container.remove(force=True)
        with contextlib.suppress(Exception):
            network.remove()


def write_dns(work: Path, names: dict[str, str]) -> None:
    (work / "dns.json").write_text(json.dumps(names))
    (work / "dns.json").chmod(0o644)
