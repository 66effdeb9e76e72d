"""The container a key gets: name, labels, mounts and hardening, as create() kwargs.

The spec is hashed into a label, so a container created under other settings
(another image, other limits or mounts) is recreated instead of adopted.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from docker.types import Mount as DockerMount

from sandkit.boxkit import AGENT_DIR
from sandkit.boxkit.http_agent import RUN_PARENT
from sandkit.paths import ThreadLayout
from sandkit.provider import SandboxKey
from sandkit.runtime.pathmap import WORKSPACE

from .options import DockerOptions

LABEL_SANDBOX_ID = "sandkit.sandbox-id"
LABEL_USER = "sandkit.user"
LABEL_THREAD = "sandkit.thread"
LABEL_OWNER = "sandkit.owner"
LABEL_SPEC = "sandkit.spec"
# A warm pool box: its slot, and which directory its storage is (boxkit's
# storage_identity). A claim moves the storage to the key's thread dir and changes nothing
# on the engine (labels cannot change, a rename queues in the engine): a claimed box keeps
# its pool name and is found from the key's thread dir by the storage label.
LABEL_POOL = "sandkit.pool"
LABEL_POOL_STORAGE = "sandkit.pool.storage"


def container_name(options: DockerOptions, key: SandboxKey) -> str:
    # The owner is part of the name: two deployments on one engine never collide.
    return f"{options.owner}-{key.sandbox_id}"


def pool_container_name(options: DockerOptions, slot: str) -> str:
    return f"{options.owner}-pool-{slot}"


def owner_filter(options: DockerOptions) -> dict[str, str | list[str] | bool]:
    return {"label": f"{LABEL_OWNER}={options.owner}"}


def create_kwargs(
    options: DockerOptions,
    layout: ThreadLayout,
    payload_dir: str,
    pool_slot: str | None = None,
    pool_storage: str | None = None,
    net_mounts: list[DockerMount] | None = None,
    net_dir: str | None = None,
) -> dict[str, Any]:
    """Everything `client.containers.create` needs for `layout.key` (or, with `pool_slot`,
    for a warm pool box whose storage `layout` describes, `pool_storage` its identity);
    `net_mounts` are its network directories (egress, ingress) below `net_dir`."""
    key = layout.key
    mounts = [
        DockerMount(target=m.virtual, source=m.real, type="bind", read_only=m.read_only)
        for m in layout.mounts
    ]
    # The agent and ripgrep: one copy on the host per payload version, mounted
    # read-only into every box (nothing copied per box; the sandbox user cannot
    # replace it). Beside it, an anonymous volume for the HTTP carrier's start-up
    # files: writable for put_archive, gone with the container (remove(v=True)),
    # labelled so one the engine failed to delete can still be found and pruned.
    volume_labels = {**options.labels, LABEL_OWNER: options.owner}
    mounts.append(DockerMount(target=AGENT_DIR, source=payload_dir, type="bind", read_only=True))
    mounts.append(DockerMount(target=RUN_PARENT, source=None, type="volume", labels=volume_labels))
    mounts.extend(net_mounts or [])
    host_config: dict[str, Any] = {
        "user": options.user,
        "mounts": mounts,
        "init": options.init,
        "cap_drop": list(options.cap_drop) or None,
        "cap_add": list(options.cap_add) or None,
        "security_opt": list(options.security_opt) or None,
        "network_mode": options.container_network,
        "read_only": options.read_only_rootfs,
        "tmpfs": dict(options.tmpfs) or None,
        "mem_limit": options.mem_limit,
        # Equal to mem_limit: no swap, so the memory limit is a real limit.
        "memswap_limit": options.mem_limit,
        "nano_cpus": int(options.cpus * 1e9) or None,
        "pids_limit": options.pids_limit or None,
        "runtime": options.runtime,
        "environment": dict(options.env),
        "working_dir": WORKSPACE,
    }
    spec = {
        "image": options.image,
        "command": list(options.command),
        "pooled": pool_slot is not None,
        **{k: _jsonable(v) for k, v in host_config.items()},
    }
    # A thread's own directories are where its storage happens to be: not part of how
    # its box is made (pool boxes of one configuration then share one spec).
    own = str(layout.user_data_dir)
    spec_text = json.dumps(spec, sort_keys=True).replace(own, "<thread>")
    if net_dir:  # like the thread dirs: where a box's state is, not how it is made
        spec_text = spec_text.replace(net_dir, "<net>")
    spec_hash = hashlib.sha256(spec_text.encode()).hexdigest()[:16]
    if pool_slot is None:
        identity = {
            LABEL_SANDBOX_ID: key.sandbox_id,
            LABEL_USER: key.user_id,
            LABEL_THREAD: key.thread_id,
        }
        name = container_name(options, key)
    else:
        identity = {LABEL_POOL: pool_slot, LABEL_POOL_STORAGE: pool_storage or ""}
        name = pool_container_name(options, pool_slot)
    labels = {**options.labels, **identity, LABEL_OWNER: options.owner, LABEL_SPEC: spec_hash}
    return {
        "image": options.image,
        "command": list(options.command),
        "name": name,
        "labels": labels,
        "detach": True,
        "stdin_open": False,
        "tty": False,
        **{k: v for k, v in host_config.items() if v is not None},
    }


def spec_hash(kwargs: dict[str, Any]) -> str:
    labels: dict[str, str] = kwargs["labels"]
    return labels[LABEL_SPEC]


def _jsonable(value: Any) -> Any:
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)
