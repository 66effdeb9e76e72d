#!/usr/bin/env bash
# Start/stop a Docker engine on a machine without systemd (CI VMs, firecracker, containers).
#
#   deploy/docker/dockerd.sh up      install docker.io if needed, start dockerd if no engine answers
#   deploy/docker/dockerd.sh down    stop the dockerd that `up` started (never someone else's)
#   deploy/docker/dockerd.sh status  say whether an engine answers, who owns it, and how it is set up
#   deploy/docker/dockerd.sh gvisor  register gVisor's runsc as the runtime "runsc" (see below)
#
# Ownership is tracked only through the PID file: an engine that was already running before `up`
# is left alone by `up` and `down`. Safe to run repeatedly; a second `up` returns in milliseconds.
#
# Environment:
#   SANDKIT_DOCKERD_PIDFILE  PID file of the dockerd we started  (/run/sandkit-dockerd.pid)
#   SANDKIT_DOCKERD_LOG      its log file                         (/var/log/sandkit-dockerd.log)
#   SANDKIT_DOCKERD_TIMEOUT  seconds to wait for the engine       (60)
#   SANDKIT_DOCKERD_ARGS     extra dockerd arguments, e.g. "--storage-driver=vfs"
#   SANDKIT_GVISOR           1: `up` also registers gVisor (as `gvisor` does)
#   SANDKIT_GVISOR_NETWORK   runsc's --network: auto (default), sandbox (gVisor's own netstack) or
#                            host (the host kernel's stack, inside the container's own netns)
#   SANDKIT_GVISOR_ARGS      extra runsc flags, e.g. "--platform=ptrace"
#   SANDKIT_RUNSC            the runsc binary to register (default: deploy/gvisor/install-runsc.sh)
#   SANDKIT_DOCKERD_CONFIG   daemon.json of an engine this script starts (/etc/docker/daemon.json)
#
# gVisor: runsc comes from deploy/gvisor/install-runsc.sh (a pinned build from the Go module
# proxy, or Debian's package with SANDKIT_GVISOR_FROM=debian; SANDKIT_RUNSC names another
# binary) and is added to the engine's daemon.json as {"runtimes": {"runsc": ...}}, merged with
# what the file already has; a running engine of ours reloads it on SIGHUP (no restart: its
# containers keep running). An
# engine that is not ours is not signalled: the script says what to add and fails if runsc is
# still unknown to it. Boxes then use it with providers.docker.runtime: runsc.
#
# --network=auto picks gVisor's own network stack (netstack) when this runsc can use it here, and
# otherwise the host's stack inside the container's network namespace (--network=host): the box
# reaches exactly what a runc box reaches, but its socket calls are served by the host kernel.
# Debian 12's runsc (2022-12) tells the root network namespace from others by
# /proc/sys/net/core/rmem_default, which Linux >= 6.11 shows in every namespace, so there it
# refuses netstack with "cannot run with network enabled in root network namespace"
# (gVisor issue 10704): auto then chooses host. The pinned build has the fix: netstack.
set -euo pipefail

PIDFILE=${SANDKIT_DOCKERD_PIDFILE:-/run/sandkit-dockerd.pid}
LOG=${SANDKIT_DOCKERD_LOG:-/var/log/sandkit-dockerd.log}
TIMEOUT=${SANDKIT_DOCKERD_TIMEOUT:-60}
EXTRA_ARGS=${SANDKIT_DOCKERD_ARGS:-}
SOCK=/var/run/docker.sock
LOCK=${PIDFILE}.lock
# Used only when the default network setup cannot start (no iptables/bridge support in the kernel).
NO_BRIDGE_ARGS="--bridge=none --iptables=false"
GVISOR=${SANDKIT_GVISOR:-0}
GVISOR_NETWORK=${SANDKIT_GVISOR_NETWORK:-auto}
GVISOR_ARGS=${SANDKIT_GVISOR_ARGS:-}
CONFIG=${SANDKIT_DOCKERD_CONFIG:-/etc/docker/daemon.json}
RUNSC=
HERE=$(cd "$(dirname "$0")" && pwd)

say() { echo "dockerd.sh: $*" >&2; }
die() { say "error: $*"; exit 1; }

# The engine we care about is the one on the standard socket, whatever DOCKER_HOST says.
engine_answers() {
    [ -S "$SOCK" ] && command -v docker >/dev/null 2>&1 \
        && DOCKER_HOST="unix://$SOCK" docker version --format '{{.Server.Version}}' >/dev/null 2>&1
}

# Prints the PID from our PID file if that process is still a dockerd; otherwise nothing.
our_pid() {
    local pid
    [ -f "$PIDFILE" ] || return 0
    pid=$(cat "$PIDFILE" 2>/dev/null || true)
    case "$pid" in '' | *[!0-9]*) return 0 ;; esac
    if [ "$(cat "/proc/$pid/comm" 2>/dev/null || true)" = dockerd ]; then
        echo "$pid"
    fi
}

ensure_installed() {
    command -v dockerd >/dev/null 2>&1 && command -v docker >/dev/null 2>&1 && return 0
    [ "$(id -u)" = 0 ] || die "dockerd is not installed and installing it needs root"
    say "installing docker.io from apt"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends docker.io >/dev/null
    command -v dockerd >/dev/null 2>&1 || die "apt-get installed docker.io but dockerd is not on PATH"
}

# Starts dockerd with the given extra arguments; prints its PID.
spawn() {
    local pid
    mkdir -p "$(dirname "$LOG")" "$(dirname "$PIDFILE")"
    echo "=== $(date -u +%FT%TZ) dockerd $*" >>"$LOG"
    # setsid: the engine must outlive the shell (and the process group) that started it.
    # shellcheck disable=SC2086
    # 9>&-: the start-up lock must not be inherited by the engine.
    setsid dockerd --host="unix://$SOCK" ${SANDKIT_DOCKERD_CONFIG:+--config-file="$CONFIG"} "$@" \
        </dev/null >>"$LOG" 2>&1 9>&- &
    pid=$!
    echo "$pid" >"$PIDFILE"
    echo "$pid"
}

# Waits until the engine answers. Returns 1 if dockerd exited, 2 on timeout.
wait_ready() {
    local pid=$1 deadline=$((SECONDS + TIMEOUT))
    while [ $SECONDS -lt $deadline ]; do
        engine_answers && return 0
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.1
    done
    return 2
}

network_failure_in_log() {
    tail -n 40 "$LOG" | grep -iE 'iptables|bridge|network controller' >/dev/null
}

fail_with_log() {
    say "error: $1"
    say "last lines of $LOG:"
    tail -n 25 "$LOG" >&2 || true
    exit 1
}

stop_pid() {
    local pid=$1
    kill -TERM "$pid" 2>/dev/null || return 0
    # dockerd stops its containers first (15 s shutdown timeout), so allow for that.
    for _ in $(seq 1 400); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    say "dockerd $pid ignored SIGTERM for 40 s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
}

cmd_up() {
    local pid rc started
    started=$(date +%s.%N)
    if engine_answers; then
        if [ -n "$(our_pid)" ]; then say "engine already running (ours, PID $(our_pid))"
        else say "engine already running (not started by this script; leaving it alone)"; fi
        [ "$GVISOR" = 1 ] && cmd_gvisor
        return 0
    fi
    ensure_installed
    [ "$(id -u)" = 0 ] || die "starting dockerd needs root"
    # Registered before the engine starts, so it knows the runtime from its first second.
    [ "$GVISOR" = 1 ] && gvisor_configure "$CONFIG"
    exec 9>"$LOCK"
    flock -w "$TIMEOUT" 9 || die "another dockerd.sh holds $LOCK"
    engine_answers && { say "engine came up while waiting for the lock"; return 0; }

    pid=$(our_pid)
    if [ -n "$pid" ]; then
        say "our dockerd (PID $pid) is starting; waiting for it"
    else
        rm -f "$PIDFILE"
        # shellcheck disable=SC2086
        pid=$(spawn $EXTRA_ARGS)
    fi
    rc=0; wait_ready "$pid" || rc=$?
    if [ "$rc" = 1 ] && network_failure_in_log; then
        say "warning: dockerd could not set up its bridge network; retrying with $NO_BRIDGE_ARGS"
        say "warning: containers then only get network_mode=none or host (no default bridge)"
        # shellcheck disable=SC2086
        pid=$(spawn $EXTRA_ARGS $NO_BRIDGE_ARGS)
        rc=0; wait_ready "$pid" || rc=$?
    fi
    case "$rc" in
        0) ;;
        1) rm -f "$PIDFILE"; fail_with_log "dockerd exited during start-up" ;;
        *) stop_pid "$pid"; rm -f "$PIDFILE"
           fail_with_log "no answer on $SOCK after ${TIMEOUT}s (dockerd stopped)" ;;
    esac
    say "engine up: PID $pid ($PIDFILE), log $LOG, ready in" \
        "$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f s", b-a}')"
    describe
    if [ "$GVISOR" = 1 ]; then
        engine_has_runsc || die "the engine started but does not list the runtime runsc"
        say "gVisor: runtime runsc registered ($(runsc_flags))"
    fi
}

cmd_down() {
    local pid
    pid=$(our_pid)
    if [ -z "$pid" ]; then
        rm -f "$PIDFILE"
        if engine_answers; then say "the running engine was not started by this script; not touching it"
        else say "no dockerd of ours is running"; fi
        return 0
    fi
    say "stopping dockerd PID $pid"
    stop_pid "$pid"
    rm -f "$PIDFILE"
    say "stopped"
}

describe() {
    DOCKER_HOST="unix://$SOCK" docker info --format \
        'server {{.ServerVersion}}, storage {{.Driver}}, cgroup {{.CgroupDriver}} v{{.CgroupVersion}}, {{.NCPU}} CPUs' \
        >&2 2>/dev/null || true
    if DOCKER_HOST="unix://$SOCK" docker network inspect bridge >/dev/null 2>&1; then
        say "network: default bridge available"
    else
        say "network: no default bridge (use network_mode=none or host)"
    fi
    DOCKER_HOST="unix://$SOCK" docker info --format 'runtimes: {{range $k, $v := .Runtimes}}{{$k}} {{end}}(default {{.DefaultRuntime}})' \
        >&2 2>/dev/null || true
}

# --- gVisor -------------------------------------------------------------------------------------

# The runsc to register: $SANDKIT_RUNSC, else what deploy/gvisor/install-runsc.sh builds (or
# installs from Debian with SANDKIT_GVISOR_FROM=debian).
ensure_runsc() {
    [ -n "$RUNSC" ] && return 0
    RUNSC=${SANDKIT_RUNSC:-}
    if [ -z "$RUNSC" ]; then
        RUNSC=$(bash "$HERE/../gvisor/install-runsc.sh") || die "deploy/gvisor/install-runsc.sh failed"
    fi
    [ -x "$RUNSC" ] || die "runsc not found at $RUNSC"
}

runsc_version() {
    local version
    # Read whole, then cut: `runsc --version | head -n1` under pipefail can fail on SIGPIPE.
    version=$("$RUNSC" --version 2>/dev/null) || version=
    version=${version%%$'\n'*}
    echo "${version#runsc version }"
}

# Can this runsc use its own network stack here? Old releases decide that a namespace is the
# root one when /proc/sys/net/core/rmem_default exists in it (gVisor issue 10704), which it
# does in every namespace on Linux >= 6.11; those cannot run netstack on such a kernel.
netstack_works() {
    case "$(runsc_version)" in
        0.0~2022* | 0.0~2021* | 0.0~2020* | release-2022* | release-2023* | release-2024[0-7]*)
            ! unshare --net test -e /proc/sys/net/core/rmem_default 2>/dev/null ;;
        *) return 0 ;;
    esac
}

runsc_network() {
    case "$GVISOR_NETWORK" in
        sandbox | host | none) echo "$GVISOR_NETWORK" ;;
        auto) if netstack_works; then echo sandbox; else echo host; fi ;;
        *) die "SANDKIT_GVISOR_NETWORK must be auto, sandbox, host or none (not $GVISOR_NETWORK)" ;;
    esac
}

# --host-uds=all: a box's AF_UNIX calls on a bind-mounted socket reach the host's socket (the
# egress proxy's and an exposed port's, docs/network.md); without it gVisor serves them itself.
HOST_UDS=--host-uds=all
runsc_flags() { echo "--network=$(runsc_network) $HOST_UDS $GVISOR_ARGS" | sed 's/ *$//'; }

# Merges {"runtimes": {"runsc": {...}}} into the daemon.json at $1, keeping every other key.
gvisor_configure() {
    local file=$1 network
    ensure_runsc
    network=$(runsc_network)
    if [ "$network" = host ] && [ "$GVISOR_NETWORK" = auto ]; then
        say "gVisor: runsc $(runsc_version) cannot use its own network stack on" \
            "Linux $(uname -r) (gVisor issue 10704); boxes use --network=host inside their" \
            "own network namespace"
    fi
    mkdir -p "$(dirname "$file")"
    # shellcheck disable=SC2086
    python3 - "$file" "$RUNSC" "--network=$network" "$HOST_UDS" $GVISOR_ARGS <<'EOF'
import json, os, sys
path, binary, *args = sys.argv[1:]
config = {}
if os.path.exists(path) and os.path.getsize(path):
    with open(path) as f:
        config = json.load(f)
wanted = {"path": binary, "runtimeArgs": args}
if config.get("runtimes", {}).get("runsc") != wanted:
    config.setdefault("runtimes", {})["runsc"] = wanted
    with open(path + ".tmp", "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    os.replace(path + ".tmp", path)
EOF
}

engine_has_runsc() {
    DOCKER_HOST="unix://$SOCK" docker info --format '{{range $k, $v := .Runtimes}}{{$k}} {{end}}' \
        2>/dev/null | tr ' ' '\n' | grep -x runsc >/dev/null
}

# The config file a running dockerd reads: its --config-file, else the default.
engine_config() {
    local pid=$1 arg next=0
    while IFS= read -r -d '' arg; do
        if [ "$next" = 1 ]; then echo "$arg"; return 0; fi
        case "$arg" in
            --config-file=*) echo "${arg#--config-file=}"; return 0 ;;
            --config-file) next=1 ;;
        esac
    done <"/proc/$pid/cmdline"
    echo /etc/docker/daemon.json
}

cmd_gvisor() {
    local pid config
    engine_answers || die "no engine answers on $SOCK (run: $0 up)"
    pid=$(our_pid)
    if [ -z "$pid" ]; then
        ensure_runsc
        if engine_has_runsc; then say "gVisor: the engine (not ours) already knows runsc"; return 0; fi
        die "the engine was not started by this script; add to its daemon.json:" \
            "{\"runtimes\": {\"runsc\": {\"path\": \"$RUNSC\", \"runtimeArgs\": [\"--network=$(runsc_network)\"]}}}" \
            "and send it SIGHUP"
    fi
    config=$(engine_config "$pid")
    gvisor_configure "$config"
    # dockerd reloads "runtimes" on SIGHUP; running containers are not touched.
    kill -HUP "$pid"
    for _ in $(seq 1 100); do
        if engine_has_runsc && [ "$(runtime_args)" = "$(runsc_flags)" ]; then
            say "gVisor: runtime runsc registered in $config ($(runsc_flags)), engine PID $pid reloaded"
            return 0
        fi
        sleep 0.1
    done
    die "engine PID $pid did not pick up runsc from $config after SIGHUP (see $LOG)"
}

# The runtimeArgs of the engine's runsc, space-separated.
runtime_args() {
    DOCKER_HOST="unix://$SOCK" docker info --format '{{with index .Runtimes "runsc"}}{{range .Args}}{{.}} {{end}}{{end}}' \
        2>/dev/null | sed 's/ *$//'
}

cmd_status() {
    local pid
    pid=$(our_pid)
    if ! engine_answers; then
        if [ -n "$pid" ]; then say "dockerd PID $pid (ours) is running but not answering on $SOCK"
        else say "no engine answers on $SOCK"; fi
        return 3
    fi
    if [ -n "$pid" ]; then say "engine running: ours, PID $pid ($PIDFILE), log $LOG"
    else say "engine running: not started by this script"; fi
    describe
}

case "${1:-}" in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    gvisor) cmd_gvisor ;;
    *) echo "usage: $0 up|down|status|gvisor" >&2; exit 2 ;;
esac
