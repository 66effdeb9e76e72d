"""Secrets: configured values and the operator's credentials stay out of the sandbox's reach.

What is checked on every provider kind:

- the configured secret (`targets.SECRET`) never comes back in command output:
  stdout, stderr, written in pieces, repeated, around both ends of the
  head/tail truncation (no fragment either), from a command that timed out,
  from a background child, and when it was passed on purpose through
  `execute(env=...)` (the command sees it, the output is still redacted);
- error messages of calls whose inputs or files hold the secret do not carry it;
- credentials in the provider process's own environment (AWS, GitHub, OpenAI,
  E2B, kubeconfig, ...) are in no command's environment: `env`,
  `/proc/self/environ`, `/proc/1/environ`, and in boxes the agent's environ
  (its pid comes from `info()`) and every other process's environ and argv;
  they do arrive when passed explicitly;
- in boxes, no file the sandbox user can read holds the secret, a planted
  credential or the provider's own credentials (E2B API key, Docker/Kubernetes
  `token_secret`, the kubeconfig's key), over both carriers (stdio, http);
- in boxes, a command that swaps the agent zipapp and kills the agent does not
  get the next agent start (and with it the secrets), and the box recovers.

Values are looked for in base64-encoded dumps decoded here, so redaction of
the output cannot hide a secret that is really in an environment.

Not covered: a command that reads a value it legitimately has and prints it
transformed (base64, reversed) defeats any output filter.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import shlex
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sandkit import SandboxError, SandboxKey
from sandkit.boxkit import BoxProvider
from sandkit.paths import ThreadLayout
from sandkit.provider import SandboxProvider
from sandkit.remote import RemoteSandbox
from sandkit.runtime.capture import REDACTED
from sandkit.sandbox import Sandbox

from .figures import Figures
from .processes_support import in_box
from .targets import SECRET, Target

WORKSPACE = "/mnt/user-data/workspace"
UPLOADS = "/mnt/user-data/uploads"
HEAD = TAIL = 32 * 1024  # exec_output_bytes (64 KiB) split in two: what stays of each end
FRAGMENT = 6  # a run of this many characters of the secret counts as a leak

# Names an operator's shell commonly holds; each gets a distinctive value.
CREDENTIAL_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AZURE_CLIENT_SECRET",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GITHUB_TOKEN",
    "GH_TOKEN",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "E2B_API_KEY",
    "HF_TOKEN",
    "NPM_TOKEN",
    "DOCKER_AUTH_CONFIG",
    "KUBECONFIG",
    "SSH_AUTH_SOCK",
    "DATABASE_URL",
)


def _fragments(value: str, size: int = FRAGMENT) -> set[str]:
    return {value[i : i + size] for i in range(len(value) - size + 1)}


def _shows_secret(text: str) -> bool:
    return any(piece in text for piece in _fragments(SECRET))


@dataclasses.dataclass
class Tally:
    """Cases tried and leaks found by one test on one provider kind."""

    kind: str
    cases: int = 0
    leaks: list[str] = dataclasses.field(default_factory=list)

    def check(self, leaked: bool, what: str) -> None:
        self.cases += 1
        if leaked:
            self.leaks.append(what)


class _SecretsReport:
    """A terminal-summary section: secret cases tried and leaks per kind."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.lines:
            terminalreporter.section("hardening secrets")
            for line in self.lines:
                terminalreporter.write_line(line)


@pytest.fixture
def tally(request: pytest.FixtureRequest, target: Target, figures: Figures) -> Iterator[Tally]:
    """Counts this test's cases; records the leaks as a figure (0 too) and in the summary."""
    manager = request.config.pluginmanager
    report = manager.get_plugin("sandkit-hardening-secrets")
    if report is None:
        report = _SecretsReport()
        manager.register(report, "sandkit-hardening-secrets")
    assert isinstance(report, _SecretsReport)
    tally = Tally(target.kind)
    yield tally
    figures.add(target.kind, "secret_leaks", len(tally.leaks))
    name = request.node.originalname
    report.lines.append(
        f"[{target.kind}] {name}: {tally.cases} cases, {len(tally.leaks)} leaks"
        + (f" ({'; '.join(tally.leaks)[:300]})" if tally.leaks else "")
    )


def _agent_pid(sandbox: Sandbox) -> int:
    """The pid of the box's agent, as the agent reports it (box kinds only)."""
    pid = sandbox.info().get("pid") if isinstance(sandbox, RemoteSandbox) else None
    assert isinstance(pid, int), "the agent reports its pid"
    return pid


def _python(code: str) -> str:
    """A command running `code` with the box's python3 (there is one: the agent needs it)."""
    return f"python3 -c {shlex.quote(code)}"


# -- output -------------------------------------------------------------------------


def test_secret_never_in_command_output(provider: SandboxProvider, tally: Tally) -> None:
    sandbox = provider.acquire(SandboxKey("secrets", "output"))
    s = shlex.quote(SECRET)
    half = len(SECRET) // 2
    shown: list[tuple[str, str, bool]] = []  # (case, where the secret should be, truncated?)

    def run(case: str, command: str, stream: str = "stdout", **kwargs: Any) -> None:
        result = sandbox.execute(command, **kwargs)
        text = result.stdout if stream == "stdout" else result.stderr
        tally.check(_shows_secret(result.stdout + result.stderr), case)
        shown.append((case, text, result.truncated))

    run("stdout", f"printf '%s\\n' {s}")
    run("stderr", f"printf '%s\\n' {s} >&2; exit 3", stream="stderr")
    run("both streams", f"printf 'out %s\\n' {s}; printf 'err %s\\n' {s} >&2")
    run(
        "written in pieces",
        f"printf %s {shlex.quote(SECRET[:half])}; sleep 0.1; printf '%s\\n' "
        f"{shlex.quote(SECRET[half:])}",
    )
    run("repeated past the cap", _python(f"print({SECRET!r} * 6000)"))
    # The printf must run before the timeout: 3 s leaves a loaded box time to start the shell.
    run("timed out", f"printf '%s\\n' {s}; sleep 30", timeout=3)
    run("background child", f"(sleep 0.05; printf '%s\\n' {s}) & printf 'started %s\\n' {s}")
    # Around both cuts: the secret starts k bytes before the end of the head,
    # and a second one ends k bytes after the start of the tail.
    n = len(SECRET)
    for k in sorted({1, 3, half, n - 3, n - 1}):
        for stream, fd in (("stdout", "sys.stdout"), ("stderr", "sys.stderr")):
            code = (
                f"import sys; s = {SECRET!r}; "
                f"{fd}.write('x' * {HEAD - k} + s + 'y' * 20000 + s + 'z' * {TAIL - n + k})"
            )
            run(f"{stream} across the cuts (k={k})", _python(code), stream=stream)
    # The same with two-byte characters, so a cut can also fall inside a character.
    code = f"import sys; s = {SECRET!r}; sys.stdout.write('é' * 16380 + s + 'ü' * 40000 + s)"
    run("across the cuts among two-byte characters", _python(code))

    for case, text, truncated in shown:
        if "cuts" not in case:
            assert REDACTED in text, f"{case}: the command's output is not there: {text[:200]!r}"
        if "cuts" in case or case == "repeated past the cap":
            assert truncated, f"{case}: the output was meant to be cut"
    assert not tally.leaks, f"the secret leaked into command output: {tally.leaks}"


def test_secret_passed_on_purpose_is_seen_and_still_redacted(
    provider: SandboxProvider, tally: Tally
) -> None:
    sandbox = provider.acquire(SandboxKey("secrets", "explicit"))
    result = sandbox.execute(
        'printf "raw %s\\n" "$TOKEN"; printf %s "$TOKEN" | base64 | tr -d "\\n"',
        env={"TOKEN": SECRET},
    )
    tally.check(_shows_secret(result.stdout + result.stderr), "explicit env, printed raw")
    raw, encoded = result.stdout.split("\n", 1)
    assert raw == f"raw {REDACTED}", result
    assert base64.b64decode(encoded).decode() == SECRET, "the command did not get the value"
    assert not tally.leaks


# -- error messages -----------------------------------------------------------------


def test_errors_do_not_carry_the_secret(provider: SandboxProvider, tally: Tally) -> None:
    """Failing calls whose arguments or files hold the secret: no message repeats it."""
    sandbox = provider.acquire(SandboxKey("secrets", "errors"))
    sandbox.write_file("holder.txt", f"token = {SECRET}\nagain {SECRET}\n")
    sandbox.write_bytes("binary.dat", b"\x00\x01" + SECRET.encode() + b"\x00")
    calls: dict[str, Callable[[], Any]] = {
        "env value with a NUL byte": lambda: sandbox.execute("true", env={"T": SECRET + "\0"}),
        "env name that is not a name": lambda: sandbox.execute("true", env={"A=B": SECRET}),
        "env value not a string": lambda: sandbox.execute(
            "true",
            env={"T": [SECRET]},  # type: ignore[dict-item]
        ),
        "edit: old text not found": lambda: sandbox.edit_file("holder.txt", "absent", "x"),
        "edit: old text twice": lambda: sandbox.edit_file("holder.txt", SECRET, "x"),
        "read of a binary file": lambda: sandbox.read_file("binary.dat"),
        "write into read-only uploads": lambda: sandbox.write_file(f"{UPLOADS}/t.txt", SECRET),
        "write over a directory": lambda: sandbox.write_file(WORKSPACE, SECRET),
        "command with a NUL byte": lambda: sandbox.execute(f"echo {SECRET}\0"),
        # Messages echo what the caller typed; the secret in it is redacted all the same.
        "missing file named by the secret": lambda: sandbox.read_file(f"{SECRET}.txt"),
        "pattern holding the secret": lambda: sandbox.grep(f"({SECRET}"),
        "directory named by the secret": lambda: sandbox.list_dir(f"missing/{SECRET}"),
    }
    for case, call in calls.items():
        try:
            call()
        except SandboxError as exc:
            tally.check(_shows_secret(f"{exc} {exc!r} {exc.message}"), f"error: {case}")
        except (TypeError, ValueError) as exc:  # refused before reaching the sandbox
            tally.check(_shows_secret(f"{exc} {exc!r}"), f"error: {case}")
        else:
            pytest.fail(f"{case}: expected an error")
    assert not tally.leaks, f"error messages repeat the secret: {tally.leaks}"


# -- environments and files in the box ----------------------------------------------


def _plant_credentials(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Credentials in this (the provider's) process environment, each with its own value."""
    planted = {}
    for name in CREDENTIAL_ENV:
        value = f"planted-{name.lower().replace('_', '-')}-{uuid.uuid4().hex[:10]}"
        monkeypatch.setenv(name, value)
        planted[value] = f"${name} of the provider process"
    # Names the runtime does pass on (PATH, TZ, USER, LOGNAME) are dropped when
    # they hold the secret.
    monkeypatch.setenv("USER", f"svc-{SECRET}")
    monkeypatch.setenv("LOGNAME", f"svc-{SECRET}")
    return planted


def _kubeconfig_needles(path: str) -> dict[str, str]:
    """Parts of the kubeconfig's private key and token, encoded and decoded."""
    config = yaml.safe_load(Path(path).read_text())
    needles = {}
    for user in config.get("users") or []:
        details = user.get("user") or {}
        for field in ("client-key-data", "token", "password"):
            value = details.get(field)
            if not value:
                continue
            needles[value[24:72]] = f"kubeconfig {field}"
            if field == "client-key-data":
                try:
                    pem = base64.b64decode(value).decode()
                except (binascii.Error, UnicodeDecodeError):
                    continue
                body = [line for line in pem.splitlines() if line and "-----" not in line]
                if body:
                    needles[body[0][8:56]] = "kubeconfig private key"
    return needles


def _provider_credentials(
    target: Target, provider: SandboxProvider, token_secret: str | None
) -> dict[str, str]:
    needles: dict[str, str] = {}
    options: Any = getattr(provider, "options", None)
    if target.kind == "e2b":
        needles[str(options.resolved_api_key())] = "E2B API key"
    if target.kind == "kubernetes":
        needles.update(_kubeconfig_needles(str(options.kubeconfig)))
    if token_secret is not None:
        needles[token_secret] = "token_secret"
    return needles


# Every environment a command can read, as "<label> <base64>" lines (base64:
# the output redaction must not hide what is really there).
DUMP_ENV = r"""
dump() { printf '%s ' "$1"; base64 -w0 "$2" 2>/dev/null || printf '-'; echo; }
printf 'env '; env -0 | base64 -w0; echo
dump self /proc/self/environ
dump pid1 /proc/1/environ
"""
DUMP_ALL = r"""
for d in /proc/[0-9]*; do
  dump "environ${d#/proc}" "$d/environ"; dump "cmdline${d#/proc}" "$d/cmdline"
done
"""


def _environments(sandbox: Sandbox, box: bool) -> dict[str, bytes]:
    script = DUMP_ENV
    if box:
        script += DUMP_ALL
        pid = _agent_pid(sandbox)
        script += f"dump agent /proc/{pid}/environ\n"
    result = sandbox.execute(script)
    assert result.exit_code == 0 and not result.truncated, result
    dumps = {}
    for line in result.stdout.splitlines():
        label, _, encoded = line.partition(" ")
        if encoded != "-":
            dumps[label] = base64.b64decode(encoded)
    # pid 1 (the host's init, or a box's root-owned init on E2B) and, once it
    # is made non-dumpable, the agent may be unreadable: nothing to leak then.
    assert {"env", "self"} <= set(dumps), sorted(dumps)
    return dumps


def _files_holding(sandbox: Sandbox, needles: list[str]) -> list[str]:
    """Files readable in the box that contain a needle (/proc, /sys and /dev left out)."""
    patterns = " ".join(f"-e {shlex.quote(n)}" for n in needles)
    command = (
        f"grep -rlsF --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev {patterns} / ; true"
    )
    result = sandbox.execute(command, timeout=120)
    assert not result.timed_out, result
    return [line for line in result.stdout.splitlines() if line]


EVIL_AGENT = """
import os, sys
args, seen = sys.argv[1:], []
for flag in ("--config", "--token-file"):
    if flag in args:
        try:
            seen.append(open(args[args.index(flag) + 1]).read())
        except OSError:
            pass
if "--stdio" in args:
    seen.append(os.read(0, 1 << 20).decode("utf-8", "replace"))
with open(os.environ.get("STOLEN") or %r, "w") as f:
    f.write("".join(seen)[::-1])
"""

REPLACE = """
import io, os, sys, zipfile
buf = io.BytesIO()
with zipfile.ZipFile(buf, "w") as z:
    z.writestr("__main__.py", sys.argv[1])
for root, dirs, files in os.walk("/opt/sandkit"):
    for name in files:
        if name == "agent.pyz":
            path = os.path.join(root, name)
            try:
                with open(path + ".new", "wb") as f:
                    f.write(buf.getvalue())
                os.replace(path + ".new", path)
                print("replaced", path)
            except OSError as exc:
                print("kept", path, exc)
"""


def _replace_the_agent(provider: SandboxProvider, key: SandboxKey) -> tuple[str, bool]:
    """A command swaps the agent zipapp for one that keeps its config, and kills the agent.

    The provider starts an agent again on the next call or acquire; if it ran
    the swapped one, that agent would be handed the secrets. Returns what it
    kept (reversed back; "" when it never ran) and whether the box works again.
    """
    sandbox = provider.acquire(key)
    pid = _agent_pid(sandbox)
    stolen = f"{WORKSPACE}/stolen-{uuid.uuid4().hex[:8]}.txt"
    evil = EVIL_AGENT % stolen
    command = f"{_python(REPLACE)} {shlex.quote(evil)}; kill -9 {pid}"
    with contextlib.suppress(SandboxError):  # the agent dies under the call
        sandbox.execute(command, timeout=30)
    kept, works = "", False
    for _ in range(3):  # a few starts of the agent, whichever one runs
        with contextlib.suppress(SandboxError):
            sandbox = provider.acquire(key)
            works = sandbox.execute("echo alive").stdout == "alive\n"
            kept = sandbox.read_file(stolen).content[::-1]
        if works:
            break
    host = ThreadLayout.for_key(provider.settings, key).user_data_dir / "workspace"
    copy = host / stolen.rsplit("/", 1)[1]
    if not kept and copy.is_file():  # the box did not come back: look on the host
        kept = copy.read_text()[::-1]
    return kept, works


def test_no_credential_in_any_command_environment(
    target: Target,
    make_provider: Callable[..., SandboxProvider],
    monkeypatch: pytest.MonkeyPatch,
    tally: Tally,
) -> None:
    planted = _plant_credentials(monkeypatch)
    box = target.isolates_execute
    carriers = ["stdio", "http"] if box else [""]
    for carrier in carriers:
        options: dict[str, Any] = {}
        token_secret = None
        if carrier:
            options["carrier"] = carrier
        if carrier == "http" and target.kind in ("docker", "kubernetes"):
            token_secret = f"token-secret-{uuid.uuid4().hex}"
            options["token_secret"] = token_secret
        if carrier == "http" and target.kind == "e2b":
            options["http_scheme"] = "http"
        provider = make_provider(options=options)
        where = f"{carrier or 'in-process'}"
        needles = {SECRET: "configured secret", **planted}
        needles.update(_provider_credentials(target, provider, token_secret))
        sandbox = provider.acquire(SandboxKey("secrets", f"env-{where}"))

        # One case per place a command can read, each searched for every value.
        for label, data in _environments(sandbox, box).items():
            entries = data.split(b"\0")
            found = [what for needle, what in needles.items() if needle.encode() in data]
            found += [
                f"${name} set"
                for name in CREDENTIAL_ENV
                if any(e.startswith(name.encode() + b"=") for e in entries)
            ]
            tally.check(bool(found), f"{where}: {label} holds {found}")
        if box:
            files = _files_holding(sandbox, list(needles))
            tally.check(bool(files), f"{where}: readable files hold a secret: {files}")

        # Passed on purpose, a credential does arrive.
        value = next(v for v, what in planted.items() if "GITHUB_TOKEN" in what)
        result = sandbox.execute('printf %s "$GITHUB_TOKEN"', env={"GITHUB_TOKEN": value})
        assert result.stdout == value, result

        if box:
            key = SandboxKey("secrets", f"env-{where}")
            stolen, works = _replace_the_agent(provider, key)
            tally.check(SECRET in stolen, f"{where}: a replaced agent was given the secrets")
            assert works, f"{where}: the box did not recover from a replaced, killed agent"

    assert not tally.leaks, f"credentials reach the sandbox: {tally.leaks}"


# A command runs as the agent's user: without PR_SET_DUMPABLE 0 it could read the agent's
# memory, where the secrets (for redaction) and the HTTP token live.
READ_AGENT_MEMORY = """
import re, sys
pid = int(sys.argv[1])
needle = bytes.fromhex(sys.argv[2])
try:
    maps = open("/proc/%d/maps" % pid).read().splitlines()
    mem = open("/proc/%d/mem" % pid, "rb")
except OSError as exc:
    print("refused", type(exc).__name__)
    sys.exit(0)
for line in maps:
    start, end = (int(x, 16) for x in line.split()[0].split("-"))
    if "r" not in line.split()[1] or end - start > 1 << 28:
        continue
    try:
        mem.seek(start)
        chunk = mem.read(end - start)
    except OSError:
        continue
    if needle in chunk:
        print("FOUND")
        sys.exit(0)
print("read, not found")
"""


# Box kinds only: on local, commands run on the host as the provider's user (not a boundary).
@pytest.mark.parametrize("target", ["docker", "kubernetes", "e2b"], indirect=True)
def test_a_command_cannot_read_the_agents_memory(
    target: Target, provider: SandboxProvider, tally: Tally
) -> None:
    sandbox = provider.acquire(SandboxKey("secrets", "memory"))
    sandbox.execute("true")  # the secret has been used by the agent at least once
    pid = _agent_pid(sandbox)
    command = f"{_python(READ_AGENT_MEMORY)} {pid} {SECRET.encode().hex()}"
    result = sandbox.execute(command, timeout=60)
    assert result.exit_code == 0, result
    tally.check("FOUND" in result.stdout, f"agent memory readable: {result.stdout.strip()}")
    assert result.stdout.startswith("refused"), result.stdout


# Run in the box as its user while the agent sleeps: waits until the agent's pid is the
# dormant waiter, then tries to open its protocol pipe (stdin), which is where the next
# `initialize` (with the secrets) arrives. "refused" once the waiter has made itself
# non-dumpable; only the interpreter's own start comes before that, so a waiter that
# stays open for the whole bound never does.
OPEN_DORMANT_STDIN = """
import os, sys, time
pid, bound = sys.argv[1], float(sys.argv[2])
end = time.monotonic() + bound
while b"--dormant" not in open("/proc/%s/cmdline" % pid, "rb").read():
    if time.monotonic() > end:
        print("never dormant")
        sys.exit(0)
    time.sleep(0.01)
while True:
    try:
        os.close(os.open("/proc/%s/fd/0" % pid, os.O_RDONLY | os.O_NONBLOCK))
    except OSError as exc:
        print("refused", type(exc).__name__)
        sys.exit(0)
    if time.monotonic() > end:
        print("OPENED")
        sys.exit(0)
    time.sleep(0.01)
"""
DORMANT_BOUND_S = 30.0  # only a waiter that never turns private waits it out


@pytest.mark.parametrize("target", ["docker", "kubernetes"], indirect=True)
def test_a_command_cannot_open_a_sleeping_agents_channel(
    target: Target, make_provider: Callable[..., SandboxProvider], tally: Tally
) -> None:
    """A sleeping agent is a small waiter on the protocol pipes until the next call, whose
    first frame is `initialize` with the secrets: a command of the box must not be able
    to open those pipes (the same protection as the agent's memory)."""
    provider = make_provider(options={"agent_sleep": "dormant", "agent_sleep_s": 0})
    key = SandboxKey("secrets", f"dormant-{uuid.uuid4().hex[:8]}")
    sandbox = provider.acquire(key)
    sandbox.execute("true")
    pid = _agent_pid(sandbox)
    assert isinstance(provider, BoxProvider)
    assert provider.sleep_idle_agents(1e-6) == 1, "the agent did not go to sleep"
    probe = ["python3", "-I", "-c", OPEN_DORMANT_STDIN, str(pid), str(DORMANT_BOUND_S)]
    ((_, run),) = in_box(target, key)
    seen = run(probe).strip()
    tally.check(seen == "OPENED", f"a sleeping agent's stdin opens: {seen}")
    assert seen.startswith("refused"), seen
    assert sandbox.execute("echo awake").stdout == "awake\n"  # the next call wakes it
