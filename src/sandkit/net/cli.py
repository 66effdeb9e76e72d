"""`python3 agent.pyz --net <command> ...`: the network programs of sandkit (stdlib).

proxy --root DIR [--listen HOST:PORT]   the egress proxy (unix mode, or TCP mode)
relay-out --listen 127.0.0.1:3128 --socket PATH   in a box: HTTP_PROXY to the proxy
relay-in --socket PATH --port N                   in a box: an exposed port
connect --port N                                  in a box: one connection over stdio
ctl --root DIR sync|ping|stats                    talk to a running proxy
policy --root DIR --box NAME [--address IP] [--json POLICY]   write a box's policy (JSON
                                                  in --json or on stdin), then sync
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from typing import Any, Dict, List, Optional


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="agent.pyz --net", description="sandkit network")
    sub = parser.add_subparsers(dest="command", required=True)
    proxy = sub.add_parser("proxy", help="run the egress proxy")
    proxy.add_argument("--root", required=True)
    proxy.add_argument("--listen", help="TCP mode: HOST:PORT (boxes known by address)")
    out = sub.add_parser("relay-out", help="box: its proxy port to the proxy's socket")
    out.add_argument("--listen", default="127.0.0.1:3128")
    out.add_argument("--socket", required=True)
    inbound = sub.add_parser("relay-in", help="box: an exposed port's socket to the server")
    inbound.add_argument("--socket", required=True)
    inbound.add_argument("--port", type=int, required=True)
    carry = sub.add_parser("connect", help="box: one connection to a port, over stdio")
    carry.add_argument("--port", type=int, required=True)
    ctl = sub.add_parser("ctl", help="ask a running proxy")
    ctl.add_argument("--root", required=True)
    ctl.add_argument("op", choices=["sync", "ping", "stats"])
    ctl.add_argument("--timeout", type=float, default=30.0)
    pol = sub.add_parser("policy", help="write a box's policy (JSON on stdin), then sync")
    pol.add_argument("--root", required=True)
    pol.add_argument("--box", required=True)
    pol.add_argument("--address")
    pol.add_argument("--json", help="the policy (default: read from stdin)")
    pol.add_argument("--remove", action="store_true")
    for each in (proxy, out, inbound, carry, ctl, pol):
        each.add_argument("--tag", help="an opaque label to find this process by")
    args = parser.parse_args(argv)
    if args.command == "proxy":
        from .proxy import run

        listen = None
        if args.listen:
            host, _, port = args.listen.rpartition(":")
            listen = (host.strip("[]") or "0.0.0.0", int(port))
        return run(args.root, listen)
    if args.command in ("relay-out", "relay-in"):
        from . import relay

        if args.command == "relay-out":
            return relay.daemon(lambda ready: relay.run_out(args.listen, args.socket, ready))
        return relay.daemon(lambda ready: relay.run_in(args.socket, args.port, ready))
    if args.command == "connect":
        from .connect import run as carry_connection

        return carry_connection(args.port)
    if args.command == "ctl":
        reply = control(args.root, {"op": args.op}, args.timeout)
        sys.stdout.write(json.dumps(reply) + "\n")
        return 0 if reply.get("ok") else 1
    return _policy(args)


def control(root: str, request: Dict[str, Any], timeout: float = 30.0) -> Dict[str, Any]:
    """One request to the proxy's control socket and its reply."""
    from .proxy import short_unix_path
    from .state import CONTROL

    path, done = short_unix_path(os.path.join(root, CONTROL))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
        sock.sendall(json.dumps(request).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    finally:
        sock.close()
        done()
    reply: Dict[str, Any] = json.loads(data or b"{}")
    return reply


def _policy(args: argparse.Namespace) -> int:
    """Kubernetes: the provider writes a box's policy through an exec in the proxy pod."""
    from . import state

    if args.remove:
        state.remove_policy(args.root, args.box)
    else:
        data = json.loads(args.json if args.json is not None else sys.stdin.read())
        state.write_policy(args.root, args.box, data, args.address)
    reply = control(args.root, {"op": "sync"})
    sys.stdout.write(json.dumps(reply) + "\n")
    return 0 if reply.get("ok") else 1
