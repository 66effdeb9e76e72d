"""The network side of a box, stdlib only (it runs in the egress proxy and in boxes).

- `policy`: egress rules, how they are parsed, and the one decision function that says
  whether a box may open a connection (`Decider`);
- `proxy`: the egress proxy a provider runs outside its boxes (HTTP CONNECT and plain
  HTTP, SNI checked for TLS), one listener per box;
- `state`: the proxy's state directory (its layout, and the one writer of a box's policy);
- `relay`: the byte pipes inside a box (its 127.0.0.1 proxy port to the proxy's socket,
  an exposed port's socket to the server in the box);
- `cli`: `python3 agent.pyz --net proxy|relay-out|relay-in|ctl ...`.

Shipped in the agent zipapp, so any image with python3 >= 3.9 runs it.
"""
