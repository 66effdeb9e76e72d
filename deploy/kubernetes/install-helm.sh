#!/usr/bin/env bash
# Build a pinned Helm 3 from the Go module proxy, once; print the binary's path on stdout.
#
#   HELM=$(deploy/kubernetes/install-helm.sh)      # ~0.01 s when cached
#
# No Helm release binary can be downloaded here, but Helm is a Go module:
# `go install helm.sh/helm/v3/cmd/helm@VERSION` builds it. The binary is cached by version
# in $SANDKIT_HELM_CACHE (default /var/cache/sandkit/helm/<version>/helm), so a second run is a
# no-op. The build runs at `nice $SANDKIT_HELM_NICE` (19) with -p $SANDKIT_HELM_GO_PARALLEL (2).
# Idempotent and safe to run concurrently (flock on the cache directory).
set -euo pipefail

VERSION=${SANDKIT_HELM_VERSION:-v3.19.5}
CACHE=${SANDKIT_HELM_CACHE:-/var/cache/sandkit/helm}
NICE=${SANDKIT_HELM_NICE:-19}
GO_PARALLEL=${SANDKIT_HELM_GO_PARALLEL:-2}
DIR=$CACHE/$VERSION
BIN=$DIR/helm

say() { echo "install-helm: $*" >&2; }

# Read whole, then matched (a `| grep -q` under pipefail can fail on SIGPIPE).
works() { local v; [ -x "$BIN" ] && v=$("$BIN" version --short 2>/dev/null) && [[ $v == "$VERSION"* ]]; }

if works; then
    echo "$BIN"
    exit 0
fi

command -v go >/dev/null || { say "error: Go is not installed (needed to build Helm)"; exit 1; }
mkdir -p "$DIR"
exec 9>"$DIR/.lock"
flock 9
if works; then # built by a concurrent run while we waited
    echo "$BIN"
    exit 0
fi

say "building helm $VERSION from the Go module proxy (a few minutes on 2 cores; cached after)"
start=$(date +%s)
gobin=$(mktemp -d "$DIR/.gobin.XXXXXX")
trap 'rm -rf "$gobin"' EXIT
# Helm reads its version from these variables; without them `helm version` says v3.x-dev.
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$VERSION"
ldflags="$ldflags -X helm.sh/helm/v3/internal/version.metadata="
ldflags="$ldflags -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
env CGO_ENABLED=0 GOBIN="$gobin" GOFLAGS="-buildvcs=false" \
    nice -n "$NICE" go install -p "$GO_PARALLEL" -trimpath -ldflags "$ldflags" \
    "helm.sh/helm/v3/cmd/helm@$VERSION" >&2
mv -f "$gobin/helm" "$BIN.tmp"
mv -f "$BIN.tmp" "$BIN"
works || { say "error: built $BIN but \`helm version\` does not report $VERSION"; exit 1; }
say "built $("$BIN" version --short) in $(($(date +%s) - start)) s"
echo "$BIN"
