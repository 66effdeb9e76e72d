"""The payload now lives in `sandkit.boxes`; this name stays for `bench/docker_bench.py`."""

from sandkit.boxes import AGENT_DIR, AGENT_PATH, RG_PATH, Payload, build_payload

__all__ = ["AGENT_DIR", "AGENT_PATH", "RG_PATH", "Payload", "build_payload"]
