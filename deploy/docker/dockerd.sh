#!/usr/bin/env bash
# Start/stop a Docker engine on a machine without systemd (CI VMs, firecracker, containers).
#
#   deploy/docker/dockerd.sh up      install docker.io if needed, start dockerd if no engine answers
#   deploy/docker/dockerd.sh down    stop the dockerd that `up` started (never someone else's)
#   deploy/docker/dockerd.sh status  say whether an engine answers, who owns it, and how it is set up
#
# Ownership is tracked only through the PID file: an engine that was already running before `up`
# is left alone by `up` and `down`. Safe to run repeatedly; a second `up` returns in milliseconds.
#
# Environment:
#   SANDKIT_DOCKERD_PIDFILE  PID file of the dockerd we started  (/run/sandkit-dockerd.pid)
#   SANDKIT_DOCKERD_LOG      its log file                         (/var/log/sandkit-dockerd.log)
#   SANDKIT_DOCKERD_TIMEOUT  seconds to wait for the engine       (60)
#   SANDKIT_DOCKERD_ARGS     extra dockerd arguments, e.g. "--storage-driver=vfs"
set -euo pipefail

PIDFILE=${SANDKIT_DOCKERD_PIDFILE:-/run/sandkit-dockerd.pid}
LOG=${SANDKIT_DOCKERD_LOG:-/var/log/sandkit-dockerd.log}
TIMEOUT=${SANDKIT_DOCKERD_TIMEOUT:-60}
EXTRA_ARGS=${SANDKIT_DOCKERD_ARGS:-}
SOCK=/var/run/docker.sock
LOCK=${PIDFILE}.lock
# Used only when the default network setup cannot start (no iptables/bridge support in the kernel).
NO_BRIDGE_ARGS="--bridge=none --iptables=false"

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
    setsid dockerd --host="unix://$SOCK" "$@" </dev/null >>"$LOG" 2>&1 9>&- &
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
    tail -n 40 "$LOG" | grep -qiE 'iptables|bridge|network controller'
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
        return 0
    fi
    ensure_installed
    [ "$(id -u)" = 0 ] || die "starting dockerd needs root"
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
    *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
