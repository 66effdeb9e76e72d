"""carrier http against a real engine: network, token handling, agent death, re-adoption."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from sandkit_docker.provider import DockerProvider

from sandkit import ErrorCode, SandboxError, SandboxKey
from sandkit.boxkit.http_agent import make_token

pytestmark = pytest.mark.docker

Factory = Callable[..., DockerProvider]
USER = "1000:1000"


def key(name: str) -> SandboxKey:
    return SandboxKey("http", name)


def container_of(docker_client: Any, k: SandboxKey) -> Any:
    (container,) = docker_client.containers.list(
        all=True, filters={"label": f"sandkit.sandbox-id={k.sandbox_id}"}
    )
    return container


def dial(box: Any, host: str, port: int) -> int:
    """Exit code of a TCP connect from inside the box (0: connected)."""
    script = f"import socket; socket.create_connection(({host!r}, {port}), 2)"
    return int(box.execute(f'python3 -c "{script}"', timeout=30).exit_code)


def kill(container: Any, pid: int) -> int:
    return int(container.exec_run(["sh", "-c", f"kill -9 {pid}"], user=USER).exit_code)


def test_network_none_becomes_an_internal_network_without_egress(
    make_provider: Factory, docker_client: Any, owner: str
) -> None:
    provider = make_provider(carrier="http")
    a = provider.acquire(key("net-a"))
    provider.acquire(key("net-b"))
    network = docker_client.networks.get(f"{owner}-internal")
    assert network.attrs["Internal"] is True
    assert network.attrs["Options"]["com.docker.network.bridge.enable_icc"] == "false"
    b_ip = container_of(docker_client, key("net-b")).attrs["NetworkSettings"]["Networks"][
        network.name
    ]["IPAddress"]
    gateway = network.attrs["IPAM"]["Config"][0]["Gateway"]
    assert dial(a, "127.0.0.1", 8765) == 0  # the dial itself works: its own agent
    assert dial(a, "1.1.1.1", 80) != 0  # no route out
    assert dial(a, b_ip, 8765) != 0  # boxes cannot reach each other's agents
    assert dial(a, gateway, 8765) != 0
    provider.shutdown()
    assert docker_client.networks.list(names=[network.name]) == []


def test_switching_a_running_box_to_carrier_http_creates_the_network(
    make_provider: Factory, docker_client: Any, owner: str
) -> None:
    """The running stdio box is recreated for http; its network did not exist yet."""
    k = key("switch")
    make_provider().acquire(k).write_file("/mnt/user-data/workspace/kept.txt", "kept")
    assert docker_client.networks.list(names=[f"{owner}-internal"]) == []
    box = make_provider(carrier="http").acquire(k)
    assert box.read_file("/mnt/user-data/workspace/kept.txt").content == "kept"
    assert docker_client.networks.list(names=[f"{owner}-internal"])


def test_host_network_is_refused_for_carrier_http(make_provider: Factory) -> None:
    for mode in ("host", "container:other"):
        with pytest.raises(SandboxError) as info:
            make_provider(carrier="http", network_mode=mode)
        assert info.value.code is ErrorCode.INVALID_ARGUMENT
        assert "carrier http" in info.value.message


def test_the_token_is_not_left_anywhere_the_engine_or_the_box_shows(
    make_provider: Factory, docker_client: Any
) -> None:
    secret = "token-secret-for-the-test-0123456789"
    provider = make_provider(carrier="http", token_secret=secret)
    k = key("token")
    box = provider.acquire(k)
    container = container_of(docker_client, k)
    token = make_token(container.id, secret)
    shown = json.dumps(container.attrs)  # labels, env, command, mounts
    assert token not in shown and secret not in shown
    # The drop box for the config and token files is empty once the agent runs.
    listing = container.exec_run(["ls", "-A", "/opt/sandkit-run/run"], user="0:0")
    assert (listing.exit_code, listing.output) == (0, b"")
    pid = box.info()["pid"]
    proc = container.exec_run(["cat", f"/proc/{pid}/cmdline"], user=USER)
    assert proc.exit_code == 0 and token.encode() not in proc.output
    # The agent is non-dumpable: its environ is not the box user's to read.
    proc = container.exec_run(["cat", f"/proc/{pid}/environ"], user=USER)
    assert proc.exit_code != 0 and b"Permission denied" in proc.output
    assert token not in box.execute("env").stdout


def test_a_dead_agent_is_unavailable_until_the_next_acquire_restarts_it(
    make_provider: Factory, docker_client: Any
) -> None:
    provider = make_provider(carrier="http")
    k = key("agent-crash")
    box = provider.acquire(k)
    box.write_file("f.txt", "kept\n")
    old_pid = box.info()["pid"]
    container = container_of(docker_client, k)
    assert kill(container, old_pid) == 0
    for _ in range(2):  # and not revived behind the caller's back
        with pytest.raises(SandboxError) as info:
            box.read_file("f.txt")
        assert info.value.code is ErrorCode.UNAVAILABLE
    assert provider.acquire(k) is box
    assert box.read_file("f.txt").content == "kept\n"
    assert box.info()["pid"] != old_pid
    container.reload()
    assert container.status == "running"


def test_an_agent_gone_between_calls_is_noticed_by_acquire(
    make_provider: Factory, docker_client: Any
) -> None:
    provider = make_provider(carrier="http")
    k = key("agent-gone")
    box = provider.acquire(k)
    old_pid = box.info()["pid"]
    assert kill(container_of(docker_client, k), old_pid) == 0
    # No call failed in between: acquire still hands out a box that answers.
    assert provider.acquire(k).info()["pid"] != old_pid


def test_a_new_provider_restarts_the_agent_with_a_fresh_token(
    make_provider: Factory, docker_client: Any
) -> None:
    k = key("adopt")
    first = make_provider(carrier="http")
    old = first.acquire(k)
    old.write_file("kept.txt", "from the first provider\n")
    old_pid = old.info()["pid"]
    container = container_of(docker_client, k)
    started = container.attrs["State"]["StartedAt"]

    second = make_provider(carrier="http")  # a restarted process: the token is gone with it
    box = second.acquire(k)
    assert box.read_file("kept.txt").content == "from the first provider\n"
    assert box.info()["pid"] != old_pid
    container.reload()
    assert container.attrs["State"]["StartedAt"] == started, "the container is not restarted"
    # The first instance's token died with its agent.
    with pytest.raises(SandboxError) as info:
        old.read_file("kept.txt")
    assert info.value.code is ErrorCode.ACCESS_DENIED


def test_a_shared_token_secret_adopts_the_running_agent(
    make_provider: Factory, docker_client: Any
) -> None:
    k = key("shared-secret")
    secret = "shared-between-replicas-0123456789"
    first = make_provider(carrier="http", token_secret=secret)
    one = first.acquire(k)
    pid = one.info()["pid"]
    second = make_provider(carrier="http", token_secret=secret)
    two = second.acquire(k)
    assert two.info()["pid"] == pid
    two.write_file("both.txt", "seen by both\n")
    assert one.read_file("both.txt").content == "seen by both\n"


def test_container_killed_mid_operation(make_provider: Factory, docker_client: Any) -> None:
    provider = make_provider(carrier="http")
    k = key("killed")
    box = provider.acquire(k)
    box.write_file("precious.txt", "intact\n")
    errors: list[BaseException] = []

    def long_command() -> None:
        try:
            box.execute("sleep 30", timeout=60)
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=long_command)
    worker.start()
    time.sleep(0.5)
    container_of(docker_client, k).kill()
    worker.join(20)
    assert not worker.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], SandboxError)
    assert errors[0].code is ErrorCode.UNAVAILABLE
    with pytest.raises(SandboxError) as info:
        box.read_file("precious.txt")
    assert info.value.code is ErrorCode.UNAVAILABLE
    again = provider.acquire(k)
    assert again.read_file("precious.txt").content == "intact\n"
    assert box.read_file("precious.txt").content == "intact\n"


def test_release_then_acquire_serves_from_the_restarted_container(
    make_provider: Factory, docker_client: Any
) -> None:
    provider = make_provider(carrier="http")
    k = key("release")
    provider.acquire(k).write_file("f.txt", "x")
    provider.release(k)
    assert container_of(docker_client, k).status == "exited"
    assert provider.get(k) is None
    assert provider.acquire(k).read_file("f.txt").content == "x"


def test_a_bridge_network_serves_the_agent_at_the_bridge_address(
    make_provider: Factory, docker_client: Any
) -> None:
    provider = make_provider(carrier="http", network_mode="bridge")
    k = key("bridge")
    box = provider.acquire(k)
    box.write_file("f.txt", "over the default bridge\n")
    assert box.read_file("f.txt").content == "over the default bridge\n"
    networks = container_of(docker_client, k).attrs["NetworkSettings"]["Networks"]
    assert set(networks) == {"bridge"}
