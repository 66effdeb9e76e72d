#!/usr/bin/env bash
# Take down the dev cluster that deploy/dev-cluster/up.sh started and leave the machine clean.
#
#   deploy/dev-cluster/down.sh
#
# Stops only processes recorded in its PID files (checked against their executables), in the
# reverse order of start: the NetworkPolicy enforcer (SANDKIT_NETPOL=1), scheduler and
# controller-manager, kubelet (then every container still running is killed through
# containerd), apiserver, etcd, containerd. Afterwards it
# unmounts whatever is still mounted below the cluster's own directories, deletes the pod
# bridge, its veths, its iptables FORWARD rule, the NetworkPolicy enforcer's nftables table
# and libcni's cached results, removes the kubelet's pod cgroups,
# restores the kernel settings the kubelet changed, and deletes the cluster state (PKI, etcd
# data, containerd root). Kept: the build cache
# (/var/cache/sandkit/k8s) and the daemon logs (/var/log/sandkit-k8s). Safe to run twice.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

need_root
[ "${SANDKIT_K8S_LOCKED:-0}" = 1 ] || take_lock

# A zombie counts as gone: the daemons were re-parented to PID 1, which may reap them late.
alive() {
    local state
    state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
    [ -n "$state" ] && [ "$state" != Z ]
}

# SIGTERM, then SIGKILL after $2 seconds.
stop_component() {
    local name=$1 grace=$2 pid
    pid=$(our_pid "$name")
    rm -f "$PIDS/$name.pid.stopping"
    if [ -z "$pid" ]; then
        rm -f "$PIDS/$name.pid"
        return 0
    fi
    say "stopping $name (PID $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 $((grace * 20))); do
        alive "$pid" || break
        sleep 0.05
    done
    if alive "$pid"; then
        say "$name ignored SIGTERM for ${grace}s; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        for _ in $(seq 1 100); do alive "$pid" || break; sleep 0.05; done
    fi
    rm -f "$PIDS/$name.pid"
}

# Kill whatever containers our containerd still runs (e.g. the kubelet was dead). Its CRI
# plugin reaps and deletes each task as soon as it exits; the state goes with its root dir.
sweep_containers() {
    [ -n "$(our_pid containerd)" ] || return 0
    local id ids
    ids=$(ctr_k8s tasks ls -q 2>/dev/null || true)
    [ -n "$ids" ] || return 0
    say "killing $(echo "$ids" | wc -w) container(s) left behind"
    for id in $ids; do
        ctr_k8s tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
    done
    for _ in $(seq 1 50); do
        [ -z "$(ctr_k8s tasks ls -q 2>/dev/null || true)" ] && return 0
        sleep 0.1
    done
    for id in $(ctr_k8s tasks ls -q 2>/dev/null || true); do
        ctr_k8s tasks delete --force "$id" >/dev/null 2>&1 || true
    done
}

# Container shims of our containerd left alive (it was killed): recognised by our socket path.
kill_orphan_shims() {
    local dir pid cmdline
    for dir in /proc/[0-9]*; do
        pid=${dir#/proc/}
        [ "$(cat "$dir/comm" 2>/dev/null)" = containerd-shim ] || continue
        cmdline=$(tr '\0' ' ' <"$dir/cmdline" 2>/dev/null) || continue
        case "$cmdline" in
            *"-address $CTR_SOCK "*)
                say "killing orphaned containerd shim PID $pid (and its containers)"
                kill_tree "$pid"
                ;;
        esac
    done
}

# SIGKILL a process and all its descendants, by PID.
kill_tree() {
    local pid=$1 child
    for child in $(cat /proc/"$pid"/task/*/children 2>/dev/null); do kill_tree "$child"; done
    kill -KILL "$pid" 2>/dev/null || true
}

umount_ours() {
    local dir mnt
    for dir in "$RUN" "$STATE"; do
        # Deepest first; a busy mount is detached lazily.
        awk -v d="$dir/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r -u \
            | while read -r mnt; do
                umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null \
                    || say "warning: could not unmount $mnt"
            done
    done
}

forward_rule_present() {
    # shellcheck disable=SC2086
    command -v iptables >/dev/null 2>&1 && iptables -w -C $FORWARD_RULE 2>/dev/null
}

netpol_table_present() {
    command -v nft >/dev/null 2>&1 && nft list table inet "$NETPOL_TABLE" >/dev/null 2>&1
}

remove_network() {
    local veth
    # The enforcer removes its table when it stops; a killed one leaves it behind.
    if netpol_table_present; then
        say "deleting the nftables table inet $NETPOL_TABLE"
        nft delete table inet "$NETPOL_TABLE" || say "warning: could not delete table inet $NETPOL_TABLE"
    fi
    while forward_rule_present; do
        # shellcheck disable=SC2086
        iptables -w -D $FORWARD_RULE || break
    done
    ip link show "$BRIDGE" >/dev/null 2>&1 || return 0
    for veth in $(ip -o link show master "$BRIDGE" 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
        ip link delete "$veth" 2>/dev/null || true
    done
    say "deleting bridge $BRIDGE"
    ip link delete "$BRIDGE" 2>/dev/null || say "warning: could not delete $BRIDGE"
}

# The kubelet's cgroups (cgroupfs driver): /kubepods/... in every hierarchy, leaves first.
remove_cgroups() {
    local base dir
    for base in /sys/fs/cgroup /sys/fs/cgroup/*; do
        [ -d "$base/kubepods" ] || continue
        find "$base/kubepods" -depth -type d 2>/dev/null | while read -r dir; do
            rmdir "$dir" 2>/dev/null || true
        done
        [ -d "$base/kubepods" ] && say "warning: $base/kubepods is still in use"
    done
    return 0
}

restore_tunables() {
    local t v
    [ -f "$STATE/sysctl.saved" ] || return 0
    while read -r t v; do
        [ -n "$t" ] && [ -w "/proc/sys/$t" ] && echo "$v" >"/proc/sys/$t" 2>/dev/null
    done <"$STATE/sysctl.saved"
    return 0
}

remove_files() {
    local link dir created="" result id
    # The kubelet links container logs into /var/log/containers (a fixed path).
    for link in /var/log/containers/*; do
        [ -L "$link" ] || continue
        case "$(readlink "$link")" in "$STATE"/*) rm -f "$link" ;; esac
    done
    # libcni's cache of results for pods whose network was never torn down (killed sandboxes).
    for result in /var/lib/cni/results/"$CNI_NET"-*; do
        [ -f "$result" ] || continue
        id=${result#/var/lib/cni/results/"$CNI_NET"-}
        id=${id%-*}
        rm -f "$result" "/var/lib/cni/results/cni-loopback-$id-lo"
    done
    [ -f "$STATE/created-dirs" ] && created=$(cat "$STATE/created-dirs")
    # The kubelet's device-plugin socket, in a directory only a kubelet uses.
    case " $(echo "$created" | tr '\n' ' ') " in
        *" /var/lib/kubelet/device-plugins "*) rm -f /var/lib/kubelet/device-plugins/kubelet.sock ;;
    esac
    rm -rf "$STATE" "$RUN"
    # Deepest first; a directory someone else now uses is not empty and stays.
    for dir in $(echo "$created" | sort -r); do
        rmdir "$dir" 2>/dev/null || true
    done
}

main() {
    local t0 pid
    t0=$(now)
    if [ ! -d "$RUN" ] && [ ! -d "$STATE" ] && ! ip link show "$BRIDGE" >/dev/null 2>&1 \
        && ! forward_rule_present && ! netpol_table_present; then
        say "nothing to take down"
        return 0
    fi
    # The NetworkPolicy enforcer (SANDKIT_NETPOL=1) first: it needs the apiserver to stop cleanly.
    pid=$(stale_netpol_pid)
    if [ -n "$pid" ]; then # its binary was rebuilt since it started
        say "stopping $NETPOL_NAME of an older build (PID $pid)"
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 200); do alive "$pid" || break; sleep 0.05; done
    fi
    stop_component "$NETPOL_NAME" 10
    stop_component kube-scheduler 10 &
    stop_component kube-controller-manager 10 &
    wait
    # Pods are not deleted one by one through the API (that takes a grace period per pod):
    # their containers are killed through containerd, and what the kubelet or the CNI plugins
    # would have undone (mounts, netns, veths, IPAM, cgroups) is removed below.
    stop_component kubelet 10
    sweep_containers
    stop_component kube-apiserver 15
    stop_component etcd 10
    stop_component containerd 10
    kill_orphan_shims
    umount_ours
    remove_network
    remove_cgroups
    restore_tunables
    remove_files
    say "down in $(since "$t0") s: nothing of the dev cluster is left (logs kept in $LOGS)"
}

main
