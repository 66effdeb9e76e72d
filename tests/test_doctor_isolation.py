"""`sandkit doctor` says which runtime boxes use and whether they share the host kernel."""

from __future__ import annotations

import pytest

from sandkit.cli.doctor import check_isolation

ENGINE = ({"runc": "runc", "runsc": "/var/cache/sandkit/gvisor/v/bin/runsc"}, "runc")


def test_docker_default_runc_shares_the_kernel() -> None:
    iso, check = check_isolation("docker", {}, True, engine=lambda host: ENGINE)
    assert (iso.runtime, iso.kernel_shared, check.status) == ("runc", True, "ok")


def test_docker_runsc_has_its_own_kernel() -> None:
    iso, check = check_isolation("docker", {"runtime": "runsc"}, True, engine=lambda host: ENGINE)
    assert (iso.runtime, iso.kernel_shared, check.status) == ("runsc", False, "ok")
    assert "gVisor" in iso.boundary


def test_docker_runtime_the_engine_lacks_is_a_failure() -> None:
    only_runc = ({"runc": "runc"}, "runc")
    iso, check = check_isolation("docker", {"runtime": "runsc"}, True, engine=lambda h: only_runc)
    assert check.status == "fail" and "dockerd.sh gvisor" in check.detail
    assert iso.kernel_shared is None


def test_docker_engine_down_is_a_warning() -> None:
    iso, check = check_isolation("docker", {"runtime": "runsc"}, True, engine=lambda host: None)
    assert check.status == "warn" and iso.kernel_shared is False


@pytest.mark.parametrize(
    ("options", "shared"), [({}, True), ({"runtime_class_name": "gvisor"}, False)]
)
def test_kubernetes_runtime_class(options: dict[str, object], shared: bool) -> None:
    iso, check = check_isolation("kubernetes", options, True)
    assert iso.kernel_shared is shared and check.status == "ok"


def test_local_and_e2b() -> None:
    local, check = check_isolation("local", {}, True)
    assert local.kernel_shared is True and check.status == "warn"
    assert check_isolation("local", {}, False)[1].status == "ok"
    assert check_isolation("e2b", {}, True)[0].kernel_shared is False
