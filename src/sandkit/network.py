"""Network settings and results: egress policies, their ceilings, exposed ports.

    from sandkit.network import EgressPolicy

    provider.set_egress(key, EgressPolicy(mode="allow", allow=["pypi.org", "*.pythonhosted.org"]))
    endpoint = provider.expose(key, 3000)

The rules and the decision are `sandkit.net.policy`'s (stdlib; the egress proxy runs the
same code). docs/security.md#network describes the model and its limits.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .errors import ErrorCode, SandboxError
from .net.policy import MAX_RULES, Policy, PolicyError, normalize_host, parse_address, parse_rule

EgressMode = Literal["none", "allow", "open"]
# The in-box port of the egress relay (HTTP_PROXY=http://127.0.0.1:<port>).
DEFAULT_PROXY_PORT = 3128
MAX_EXPOSED_PORTS = 64


class EgressPolicy(BaseModel):
    """Where a box's commands may connect to.

    `none`: nowhere. `allow`: the destinations an `allow` rule names. `open`: every public
    destination. `deny` rules win over `allow` rules in every mode. Rules: `pypi.org`,
    `*.github.com` (names below it), `10.1.0.0/16` (addresses), each with optional ports
    (`:443`, `:8000-8100`, `:*`; default 80 and 443). Loopback, link-local, metadata and
    the host are refused whatever the rules; private addresses need a CIDR rule.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: EgressMode = "none"
    allow: tuple[str, ...] = Field(default=(), max_length=MAX_RULES)
    deny: tuple[str, ...] = Field(default=(), max_length=MAX_RULES)

    @field_validator("allow", "deny", mode="before")
    @classmethod
    def _rules(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, (list, tuple)):
            return value
        try:
            return tuple(dict.fromkeys(parse_rule(item).text for item in value))
        except PolicyError as exc:
            raise ValueError(str(exc)) from None

    @model_validator(mode="after")
    def _consistent(self) -> EgressPolicy:
        try:
            self.compiled()
        except PolicyError as exc:
            raise ValueError(str(exc)) from None
        return self

    def compiled(self) -> Policy:
        """The stdlib form the decision function and the proxy use."""
        return Policy.from_dict(self.to_wire())

    def to_wire(self) -> dict[str, Any]:
        return {"mode": self.mode, "allow": list(self.allow), "deny": list(self.deny)}

    @classmethod
    def parse(cls, value: Any) -> EgressPolicy:
        """A policy from a model, a mode name or a mapping; INVALID_ARGUMENT when invalid."""
        if isinstance(value, EgressPolicy):
            return value
        if isinstance(value, str):
            value = {"mode": value}
        try:
            return cls.model_validate(value)
        except ValueError as exc:
            raise SandboxError(
                ErrorCode.INVALID_ARGUMENT, f"invalid egress policy: {_first_error(exc)}"
            ) from None

    def problems_within(self, ceiling: EgressPolicy) -> list[str]:
        return self.compiled().problems_within(ceiling.compiled())

    def describe(self) -> str:
        if self.mode == "none":
            return "none (no network)"
        parts: list[str] = [self.mode]
        if self.allow:
            parts.append("allow " + ", ".join(self.allow))
        if self.deny:
            parts.append("deny " + ", ".join(self.deny))
        return "; ".join(parts)


def _first_error(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        found = errors()
        if found:
            where = ".".join(str(p) for p in found[0].get("loc", ()))
            message = str(found[0].get("msg", exc)).removeprefix("Value error, ")
            return f"{where}: {message}" if where else message
    return str(exc)


class EgressOptions(BaseModel):
    """`egress` in a box provider's options: what boxes get and the most they may get.

    With the default (ceiling none) the feature is off and boxes are exactly as without it:
    no network at all. Any other ceiling makes the provider run its egress proxy; every box
    then reaches the network only through it, with the proxy variables set for commands.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: EgressPolicy = Field(
        default_factory=EgressPolicy,
        description="The policy of a box until set_egress changes it (default: none).",
    )
    ceiling: EgressPolicy | None = Field(
        None,
        description="The most set_egress may grant (ACCESS_DENIED beyond it); its deny rules "
        "apply to every box. None: the default policy is the ceiling.",
    )
    hosts: dict[str, list[str]] = Field(
        default_factory=dict,
        description="The operator's own name -> addresses table for the proxy's resolver "
        "(like /etc/hosts; such names may resolve to private addresses). Always-denied "
        "addresses stay denied.",
    )
    proxy_port: int = Field(
        DEFAULT_PROXY_PORT,
        ge=1024,
        le=65535,
        description="Port of the proxy relay on the box's loopback (HTTP_PROXY).",
    )
    no_proxy: tuple[str, ...] = Field(
        ("localhost", "127.0.0.1", "::1"),
        description="NO_PROXY for commands: the box's own servers are reached directly.",
    )

    @field_validator("hosts", mode="before")
    @classmethod
    def _hosts(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        out: dict[str, list[str]] = {}
        for name, addresses in value.items():
            items = [addresses] if isinstance(addresses, str) else list(addresses or [])
            try:
                host = normalize_host(str(name))
            except PolicyError as exc:
                raise ValueError(f"hosts: {exc}") from None
            parsed = [parse_address(str(a)) for a in items]
            if not parsed or any(p is None for p in parsed):
                raise ValueError(f"hosts: {name!r} needs one or more IP addresses")
            out[host] = [str(p) for p in parsed]
        return out

    @model_validator(mode="after")
    def _policy_within_ceiling(self) -> EgressOptions:
        problems = self.policy.problems_within(self.effective_ceiling)
        if problems:
            raise ValueError("egress.policy exceeds egress.ceiling: " + "; ".join(problems))
        return self

    @property
    def effective_ceiling(self) -> EgressPolicy:
        return self.ceiling if self.ceiling is not None else self.policy

    @property
    def enabled(self) -> bool:
        """Whether boxes are made with a way to the proxy (a ceiling above none)."""
        return self.effective_ceiling.mode != "none"

    def command_env(self, proxy_host: str = "127.0.0.1") -> dict[str, str]:
        """The proxy variables every command gets (curl, pip, git, npm, Python read them).
        `proxy_host`: where the box reaches the proxy (its own relay on the loopback, or a
        proxy pod's address)."""
        if not self.enabled:
            return {}
        url = f"http://{proxy_host}:{self.proxy_port}"
        no_proxy = ",".join(self.no_proxy)
        env = {}
        for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
            env[name] = url
        env["no_proxy"] = env["NO_PROXY"] = no_proxy
        return env

    def check(self, policy: EgressPolicy) -> EgressPolicy:
        """`policy` if the ceiling permits it, else ACCESS_DENIED saying what exceeds it."""
        if not self.enabled and policy.mode != "none":
            raise SandboxError(
                ErrorCode.ACCESS_DENIED,
                "egress is off for this provider (egress.ceiling is none); the operator "
                "must set a ceiling first",
            )
        problems = policy.problems_within(self.effective_ceiling)
        if problems:
            raise SandboxError(
                ErrorCode.ACCESS_DENIED,
                "egress policy beyond the operator's ceiling: " + "; ".join(problems),
            )
        return policy

    def enforced(self, policy: EgressPolicy) -> dict[str, Any]:
        """What the proxy enforces for a box with `policy`: the ceiling's denials added."""
        return policy.compiled().under(self.effective_ceiling.compiled()).to_dict()


class ExposeOptions(BaseModel):
    """`expose` in a box provider's options: may ports of a box be opened to the platform."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(
        False, description="Allow expose(): boxes are made with an ingress path for ports."
    )
    min_port: int = Field(1, ge=1, le=65535, description="Lowest port that may be exposed.")
    max_port: int = Field(65535, ge=1, le=65535, description="Highest port that may be exposed.")
    max_ports: int = Field(
        8, ge=1, le=MAX_EXPOSED_PORTS, description="Ports one box may have exposed at once."
    )

    @model_validator(mode="after")
    def _range(self) -> ExposeOptions:
        if self.min_port > self.max_port:
            raise ValueError("expose.min_port must be <= expose.max_port")
        return self

    def check_port(
        self, port: object, reserved: Collection[int] = (), exposing: bool = True
    ) -> int:
        """`port` if it may be exposed (`exposing`) or looked up; INVALID_ARGUMENT if not.
        `reserved`: ports in the box that are sandkit's own."""
        if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
            raise SandboxError(ErrorCode.INVALID_ARGUMENT, f"port must be 1-65535, not {port!r}")
        if not exposing:
            return port
        if not self.min_port <= port <= self.max_port:
            raise SandboxError(
                ErrorCode.INVALID_ARGUMENT,
                f"port {port} is outside expose.min_port-max_port "
                f"({self.min_port}-{self.max_port})",
            )
        if port in reserved:
            raise SandboxError(
                ErrorCode.INVALID_ARGUMENT, f"port {port} belongs to sandkit in the box"
            )
        return port

    def check_capacity(self, exposed: Collection[int], port: int) -> None:
        """CAPACITY when `port` would be one more than `max_ports` exposed at once."""
        if port not in exposed and len(exposed) >= self.max_ports:
            raise SandboxError(
                ErrorCode.CAPACITY,
                f"{len(exposed)} ports are exposed, the limit (expose.max_ports) is "
                f"{self.max_ports}",
            )


class Endpoint(BaseModel):
    """Where an exposed port of a box is reached from the provider's side.

    `url` is what an HTTP client uses (its host is only the Host header when `unix_socket`
    is set: then connect to that socket instead). The preview gateway
    (`sandkit.gateway`) is how a platform's users get there, with a signed token.
    """

    model_config = ConfigDict(frozen=True)

    user_id: str
    thread_id: str
    port: int
    url: str
    unix_socket: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)

    @classmethod
    def over_socket(cls, user_id: str, thread_id: str, port: int, path: str) -> Endpoint:
        """A port reached through a unix socket on the provider's machine (Docker's relay,
        Kubernetes' port-forward listener): the server in the box sees Host localhost:port."""
        return cls(
            user_id=user_id,
            thread_id=thread_id,
            port=port,
            url=f"http://localhost:{port}",
            unix_socket=path,
        )
