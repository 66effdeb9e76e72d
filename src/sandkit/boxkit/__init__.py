"""The provider kit: what a box provider (Docker, Kubernetes, E2B, your own) is built on.

    from sandkit.boxkit import BoxOptions, BoxProvider, BoxRecord

`BoxProvider` owns the lifecycle (see its module); a provider implements how
its boxes are created, found, stopped, removed and reached. The pieces it
uses on the way are here too: the agent payload, the in-box jail, host
directories, the HTTP agent slot and tokens, byte streams, and sweeps that
finish past a failure. `docs/providers/writing.md` is the walk-through;
`sandkit.testing` is the conformance suite a provider runs.
"""

from ..transports.streams import ByteStream, StreamOpener
from .http_agent import AgentSlot, SlotTransport, make_token
from .layout import box_mapping, prepare_host_dirs
from .options import BoxOptions
from .payload import (
    AGENT_DIR,
    AGENT_PATH,
    RG_PATH,
    Payload,
    build_payload,
    end_tagged_argv,
    find_host_rg,
    host_copy,
)
from .pool import Claim, WarmPoolOptions
from .poolstorage import (
    claim_storage,
    pool_layout,
    pool_root,
    retire_storage,
    storage_identity,
)
from .provider import BoxProvider, BoxRecord
from .reaper import IdleReaper
from .sandbox import BoxSandbox
from .sweep import sweep, with_retries
from .table import BoxTable

__all__ = [
    "AGENT_DIR",
    "AGENT_PATH",
    "RG_PATH",
    "AgentSlot",
    "BoxOptions",
    "BoxProvider",
    "BoxRecord",
    "BoxSandbox",
    "BoxTable",
    "ByteStream",
    "Claim",
    "IdleReaper",
    "Payload",
    "SlotTransport",
    "StreamOpener",
    "WarmPoolOptions",
    "box_mapping",
    "build_payload",
    "claim_storage",
    "end_tagged_argv",
    "find_host_rg",
    "host_copy",
    "make_token",
    "pool_layout",
    "pool_root",
    "prepare_host_dirs",
    "retire_storage",
    "storage_identity",
    "sweep",
    "with_retries",
]
