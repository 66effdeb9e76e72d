"""What boxes cost the host's memory: MemAvailable and the boxes' memory cgroups."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

MIB = 1024 * 1024


def mem_available_mib(samples: int = 5, pause: float = 0.4) -> float:
    """Median of a few MemAvailable readings (other jobs move it by tens of MiB)."""
    values = []
    for i in range(samples):
        if i:
            time.sleep(pause)
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                values.append(int(line.split()[1]) / 1024)
                break
    return statistics.median(values)


def cgroup_memory_bytes(path: Path) -> int | None:
    """RSS + kernel memory charged to a memory cgroup (v1 or v2): usage minus page cache."""
    if not path.is_dir():
        return None
    stat: dict[str, int] = {}
    for line in (path / "memory.stat").read_text().splitlines():
        name, _, value = line.partition(" ")
        if value.strip().isdigit():
            stat[name] = int(value)
    usage_file = path / "memory.usage_in_bytes"
    usage = int((usage_file if usage_file.exists() else path / "memory.current").read_text())
    # Page cache is not the box's own memory, except shmem: gVisor keeps all of its
    # processes' memory in one memfd, which the cgroup counts as (shmem) cache.
    cache = stat.get("total_cache", stat.get("file", 0))
    shmem = stat.get("total_shmem", stat.get("shmem", 0))
    return max(0, usage - (cache - shmem))


def container_memory_bytes(container_id: str) -> int | None:
    """cgroup_memory_bytes of a Docker container (cgroupfs v1 or systemd v2 layout)."""
    for base in ("/sys/fs/cgroup/memory/docker", "/sys/fs/cgroup/system.slice"):
        for name in (container_id, f"docker-{container_id}.scope"):
            got = cgroup_memory_bytes(Path(base, name))
            if got is not None:
                return got
    return None


ENGINE_PROCESSES = ("dockerd", "containerd", "containerd-shim", "containerd-shim-runc-v2")


def engine_pss_mib() -> float:
    """Pss of the container engine's processes (dockerd, containerd, every shim): what a
    box costs outside its memory cgroup, besides the kernel."""
    total_kib = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() not in ENGINE_PROCESSES:
                continue
            rollup = (entry / "smaps_rollup").read_text()
        except OSError:
            continue
        for line in rollup.splitlines():
            if line.startswith("Pss:"):
                total_kib += int(line.split()[1])
    return total_kib / 1024
