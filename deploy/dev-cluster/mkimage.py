#!/usr/bin/env python3
"""Wrap one root-filesystem tar into a single-layer image archive (`docker save` format).

No registry and no Docker engine are needed: the archive is imported straight into containerd
with `ctr -n k8s.io images import`. The layer is stored uncompressed, so its digest is also
its diff ID.

    mkimage.py --tag sandkit/sandbox:debian12 --layer rootfs.tar --out image.tar \
        [--entrypoint /pause] [--cmd python3] [--user 1000:1000] [--workdir /home/sandbox] \
        [--env KEY=VALUE ...] [--label KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import tarfile
import time
from pathlib import Path

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def add_bytes(archive: tarfile.TarFile, name: str, data: bytes, mtime: int) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = mtime
    info.mode = 0o644
    archive.addfile(info, io.BytesIO(data))


def image_config(args: argparse.Namespace, diff_id: str, created: str) -> dict[str, object]:
    env = list(args.env)
    if not any(item.startswith("PATH=") for item in env):
        env.insert(0, f"PATH={DEFAULT_PATH}")
    config: dict[str, object] = {"Env": env}
    if args.entrypoint:
        config["Entrypoint"] = args.entrypoint
    if args.cmd:
        config["Cmd"] = args.cmd
    if args.user:
        config["User"] = args.user
    if args.workdir:
        config["WorkingDir"] = args.workdir
    if args.label:
        config["Labels"] = dict(item.split("=", 1) for item in args.label)
    return {
        "architecture": args.arch,
        "os": "linux",
        "created": created,
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
        "history": [{"created": created, "created_by": "sandkit deploy/dev-cluster/mkimage.py"}],
    }


def build(args: argparse.Namespace) -> None:
    layer = Path(args.layer)
    layer_id = sha256_file(layer)
    mtime = int(os.environ.get("SOURCE_DATE_EPOCH", time.time()))
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(mtime))
    config = json.dumps(image_config(args, layer_id, created), sort_keys=True).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    layer_name = f"{layer_id}/layer.tar"
    manifest = [{"Config": config_name, "RepoTags": [args.tag], "Layers": [layer_name]}]
    out = Path(args.out)
    tmp = out.with_name(out.name + ".part")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as archive:
        add_bytes(archive, config_name, config, mtime)
        info = archive.gettarinfo(str(layer), arcname=layer_name)
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        with layer.open("rb") as fh:
            archive.addfile(info, fh)
        add_bytes(archive, "manifest.json", json.dumps(manifest).encode(), mtime)
    tmp.replace(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tag", required=True, help="image reference, e.g. sandkit/pause:1")
    parser.add_argument("--layer", required=True, help="uncompressed tar of the root filesystem")
    parser.add_argument("--out", required=True, help="archive to write")
    parser.add_argument("--arch", default="amd64")
    parser.add_argument("--entrypoint", nargs="+")
    parser.add_argument("--cmd", nargs="+")
    parser.add_argument("--user")
    parser.add_argument("--workdir")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--label", action="append", default=[], metavar="KEY=VALUE")
    build(parser.parse_args())


if __name__ == "__main__":
    main()
