#!/usr/bin/env bash
# gVisor for sandkit boxes: build a pinned runsc (and its containerd shim) once; print the
# runsc path on stdout.
#
#   RUNSC=$(deploy/gvisor/install-runsc.sh)        # ~0.01 s when cached
#
# Two sources (SANDKIT_GVISOR_FROM):
#   go (default)  runsc and containerd-shim-runsc-v1 built from the Go module proxy at the pinned
#                 pseudo-version below (gVisor's `go` branch is a Go module), into
#                 $SANDKIT_GVISOR_CACHE/<version>/bin; ~5 min on 2 cores the first time.
#   debian        Debian's `runsc` package (apt). Debian 12 ships a 2022-12 runsc, which on this
#                 kind of machine (Linux 6.18) cannot use gVisor's network stack (issue 10704),
#                 fails `statx` with AT_NO_AUTOMOUNT (so `ls -l` and `stat` fail in Debian 12
#                 images), has only the ptrace platform (about 8 host tasks per process, so a
#                 256-task pids limit stops a box at ~27 processes and then kills it), lets a box
#                 that exceeds its memory limit die whole, and has no containerd shim (no
#                 Kubernetes). docs/security.md has the measurements.
#
# The shim is built with one change (SHIM_PATCH below): gVisor's shim sets its own oom_score_adj
# to -999 and gives up when it may not ("failed to set OOM Score on shim: permission denied"),
# which is always the case without CAP_SYS_RESOURCE (these VMs: see docs/dev-cluster.md,
# pitfall 3); patched, it carries on with the score it has, as containerd's own shims do when
# they may not lower theirs. And gVisor's shim, built on containerd 2's shim library, answers
# `start` with {"version":2,"address":...} where containerd 1.6 (Debian 12) expects the bare
# address ("dial unix {...}: invalid argument"): containerd-shim-runsc-v1 here is a small
# wrapper that passes the real shim (containerd-shim-runsc-v1.real) everything and reduces
# that answer to the address, which every containerd reads. runsc itself is built unchanged.
#
# The build runs at `nice $SANDKIT_GVISOR_NICE` (19) with -p $SANDKIT_GVISOR_GO_PARALLEL (2).
# Idempotent and safe to run concurrently (flock on the cache directory).
set -euo pipefail

VERSION=${SANDKIT_GVISOR_VERSION:-v0.0.0-20260905035102-160fafc42237}
FROM=${SANDKIT_GVISOR_FROM:-go}
CACHE=${SANDKIT_GVISOR_CACHE:-/var/cache/sandkit/gvisor}
NICE=${SANDKIT_GVISOR_NICE:-19}
GO_PARALLEL=${SANDKIT_GVISOR_GO_PARALLEL:-2}
DIR=$CACHE/$VERSION
BIN=$DIR/bin

say() { echo "install-runsc: $*" >&2; }
die() { say "error: $*"; exit 1; }

if [ "$FROM" = debian ]; then
    if [ ! -x /usr/bin/runsc ]; then
        [ "$(id -u)" = 0 ] || die "installing Debian's runsc needs root"
        say "installing runsc from apt"
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -qq --no-install-recommends runsc >/dev/null 2>&1 \
            || { apt-get update -qq && apt-get install -y -qq --no-install-recommends runsc >/dev/null; }
    fi
    [ -x /usr/bin/runsc ] || die "apt-get installed runsc but /usr/bin/runsc is missing"
    echo /usr/bin/runsc
    exit 0
fi
[ "$FROM" = go ] || die "SANDKIT_GVISOR_FROM must be go or debian (not $FROM)"

SHIM_PATCH=2 # bump when the shim's patch or its wrapper changes
# The whole of `runsc --version` is read before it is matched: `runsc --version | grep -q`
# under pipefail fails whenever grep exits before runsc writes its second line (SIGPIPE, 141),
# which is what failed a cold CI run on a loaded machine.
works() {
    local version
    [ -x "$BIN/runsc" ] && [ -x "$BIN/containerd-shim-runsc-v1" ] \
        && [ -x "$BIN/containerd-shim-runsc-v1.real" ] \
        && [ "$(cat "$BIN/.shim-patch" 2>/dev/null)" = "$SHIM_PATCH" ] \
        && version=$("$BIN/runsc" --version 2>/dev/null) \
        && [[ $version == "runsc version go-$VERSION"* ]]
}

if works; then
    echo "$BIN/runsc"
    exit 0
fi

command -v go >/dev/null || die "Go is not installed (needed to build runsc)"
mkdir -p "$DIR"
exec 9>"$DIR/.lock"
flock 9
if works; then # built by a concurrent run while we waited
    echo "$BIN/runsc"
    exit 0
fi

say "building runsc + containerd-shim-runsc-v1 $VERSION from the Go module proxy" \
    "(about 5 minutes on 2 cores; cached after)"
start=$(date +%s)
gobin=$(mktemp -d "$DIR/.gobin.XXXXXX")
trap 'rm -rf "$gobin"' EXIT
# Without it `runsc --version` says VERSION_MISSING.
ldflags="-s -w -X gvisor.dev/gvisor/runsc/version.version=go-$VERSION"
env CGO_ENABLED=0 GOBIN="$gobin" GOFLAGS="-buildvcs=false" \
    nice -n "$NICE" go install -p "$GO_PARALLEL" -trimpath -ldflags "$ldflags" \
    "gvisor.dev/gvisor/runsc@$VERSION" >&2
# The shim from a patched copy of the same module (the module cache is read-only).
src="$(go env GOMODCACHE)/gvisor.dev/gvisor@$VERSION"
[ -d "$src" ] || die "gvisor.dev/gvisor@$VERSION is not in the module cache after the build"
cp -r "$src" "$gobin/src"
chmod -R u+w "$gobin/src"
manager="$gobin/src/pkg/shim/v1/manager.go"
sed -i 's/if err := sys.SetOOMScore(cmd.Process.Pid, oomScoreMax); err != nil {/if err := sys.SetOOMScore(cmd.Process.Pid, oomScoreMax); err != nil \&\& !os.IsPermission(err) {/' \
    "$manager"
grep -q 'err != nil && !os.IsPermission(err) {' "$manager" \
    || die "the shim patch no longer applies to $VERSION (pkg/shim/v1/manager.go changed)"
(cd "$gobin/src" && env CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=mod" \
    nice -n "$NICE" go build -p "$GO_PARALLEL" -trimpath -ldflags "-s -w" \
    -o "$gobin/containerd-shim-runsc-v1" ./shim) >&2
cat >"$gobin/wrapper" <<'EOF'
#!/bin/sh
# containerd-shim-runsc-v1 for any containerd (written by deploy/gvisor/install-runsc.sh): the
# real shim answers `start` with JSON bootstrap params; containerd < 2 wants the bare address.
real="$(dirname "$0")/containerd-shim-runsc-v1.real"
last=
for arg in "$@"; do last=$arg; done
[ "$last" = start ] || exec "$real" "$@"
out=$("$real" "$@") || { rc=$?; printf '%s' "$out"; exit "$rc"; }
case "$out" in
    "{"*) printf '%s' "$out" | sed -n 's/.*"address":"\([^"]*\)".*/\1/p' | tr -d '\n' ;;
    *) printf '%s' "$out" ;;
esac
EOF
chmod 755 "$gobin/wrapper"
mkdir -p "$BIN"
mv -f "$gobin/containerd-shim-runsc-v1" "$BIN/containerd-shim-runsc-v1.real.tmp"
mv -f "$gobin/wrapper" "$BIN/containerd-shim-runsc-v1.tmp"
mv -f "$gobin/runsc" "$BIN/runsc.tmp"
mv -f "$BIN/containerd-shim-runsc-v1.real.tmp" "$BIN/containerd-shim-runsc-v1.real"
mv -f "$BIN/containerd-shim-runsc-v1.tmp" "$BIN/containerd-shim-runsc-v1"
mv -f "$BIN/runsc.tmp" "$BIN/runsc"
echo "$SHIM_PATCH" >"$BIN/.shim-patch"
works || die "built $BIN/runsc but \`runsc --version\` does not report go-$VERSION"
version=$("$BIN/runsc" --version)
say "built ${version%%$'\n'*} in $(($(date +%s) - start)) s"
echo "$BIN/runsc"
