#!/usr/bin/env bash
# Build a local sandbox base image (Debian minbase + python3) when no container registry is
# reachable: debootstrap from the machine's own Debian mirror, then `docker import`.
#
#   deploy/images/build-base-image.sh [--with-ripgrep] [--tag TAG] [--force] [--refresh]
#                                     [--release CODENAME] [--mirror URI]
#
#   --with-ripgrep   also install Debian's ripgrep (/usr/bin/rg); default tag gets "-ripgrep"
#   --tag TAG        image tag (default sandkit/base:debian<N>[-ripgrep], N from the release)
#   --force          re-import the image even if TAG exists (reuses the cached root filesystem)
#   --refresh        also re-run debootstrap (fresh packages from the mirror)
#   --release NAME   Debian codename (default: this machine's, from /etc/os-release)
#   --mirror URI     Debian mirror (default: the machine's apt sources; env SANDKIT_DEBIAN_MIRROR)
#
# The root filesystem is cached as a tarball in /var/cache/sandkit (env SANDKIT_CACHE_DIR), keyed
# by release, architecture and options, so a rebuild of the image takes seconds. Needs root (for
# debootstrap) and a running engine (deploy/docker/dockerd.sh up). Prints the tag on stdout.
set -euo pipefail

# Bump when the customisation below changes, so stale cached tarballs are not reused.
RECIPE=1
SANDBOX_UID=1000

CACHE_DIR=${SANDKIT_CACHE_DIR:-/var/cache/sandkit}
MIRROR=${SANDKIT_DEBIAN_MIRROR:-}
WITH_RG=0 TAG="" FORCE=0 REFRESH=0 RELEASE=""

say() { echo "build-base-image: $*" >&2; }
die() { say "error: $*"; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f s", b-a}'; }

while [ $# -gt 0 ]; do
    case "$1" in
        --with-ripgrep) WITH_RG=1 ;;
        --tag) TAG=${2:?--tag needs a value}; shift ;;
        --tag=*) TAG=${1#*=} ;;
        --force) FORCE=1 ;;
        --refresh) REFRESH=1; FORCE=1 ;;
        --release) RELEASE=${2:?--release needs a value}; shift ;;
        --release=*) RELEASE=${1#*=} ;;
        --mirror) MIRROR=${2:?--mirror needs a value}; shift ;;
        --mirror=*) MIRROR=${1#*=} ;;
        -h | --help) sed -n '2,17p' "$0"; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
    shift
done

release_number() {
    case "$1" in
        bullseye) echo 11 ;; bookworm) echo 12 ;; trixie) echo 13 ;; forky) echo 14 ;;
        *) die "unknown Debian release '$1'" ;;
    esac
}

detect_release() {
    local id codename
    # shellcheck source=/dev/null
    id=$(. /etc/os-release && echo "${ID:-}")
    # shellcheck source=/dev/null
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    if [ "$id" != debian ] || [ -z "$codename" ]; then
        die "this machine is not Debian ($id); pass --release CODENAME and --mirror URI"
    fi
    echo "$codename"
}

# First URI of an apt source (deb822 *.sources or one-line sources.list) that carries $1 itself,
# not only its -security/-updates suites.
detect_mirror() {
    local suite=$1 f uri
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        uri=$(awk -v suite="$suite" '
            function flush() { if (deb && has && !off && uri != "") { print uri; found = 1; exit } }
            /^[[:space:]]*$/ { flush(); deb = has = off = 0; uri = ""; next }
            /^[[:space:]]*#/ { next }
            tolower($1) == "types:" { for (i = 2; i <= NF; i++) if ($i == "deb") deb = 1 }
            tolower($1) == "uris:" { uri = $2 }
            tolower($1) == "suites:" { for (i = 2; i <= NF; i++) if ($i == suite) has = 1 }
            tolower($1) == "enabled:" && tolower($2) == "no" { off = 1 }
            END { if (!found) flush() }' "$f")
        [ -n "$uri" ] && { echo "$uri"; return 0; }
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        uri=$(sed -E 's/\[[^]]*\]//' "$f" | awk -v suite="$suite" \
            '$1 == "deb" && $3 == suite { print $2; exit }')
        [ -n "$uri" ] && { echo "$uri"; return 0; }
    done
    die "no apt source for '$suite' found; pass --mirror URI"
}

ensure_tools() {
    command -v docker >/dev/null 2>&1 || die "docker CLI missing; run deploy/docker/dockerd.sh up"
    docker version --format '{{.Server.Version}}' >/dev/null 2>&1 \
        || die "no Docker engine answers; run deploy/docker/dockerd.sh up"
}

ensure_debootstrap() {
    command -v debootstrap >/dev/null 2>&1 && return 0
    say "installing debootstrap from apt"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap \
        >/dev/null
}

umount_below() {
    local m
    # Deepest first; debootstrap can leave /proc and /sys mounted in the target when it fails.
    findmnt -rn -o TARGET 2>/dev/null | awk -v d="$1/" 'index($0, d) == 1' | sort -r \
        | while read -r m; do umount -l "$m" || true; done
}

WORK=""
cleanup() {
    if [ -n "$WORK" ] && [ -d "$WORK" ]; then
        umount_below "$WORK"
        rm -rf --one-file-system "$WORK"
    fi
}
trap cleanup EXIT

# Trims the root filesystem and adds the sandbox user. Runs before the tarball is cached.
customise() {
    local root=$1
    chroot "$root" groupadd --gid "$SANDBOX_UID" sandbox
    chroot "$root" useradd --uid "$SANDBOX_UID" --gid "$SANDBOX_UID" --create-home \
        --home-dir /home/sandbox --shell /bin/bash sandbox
    # Keep later `apt-get install` in derived images as lean as this one (copyrights stay).
    mkdir -p "$root/etc/dpkg/dpkg.cfg.d"
    cat >"$root/etc/dpkg/dpkg.cfg.d/sandkit-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
    find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
    find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
    rm -rf "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/var/lib/apt/lists/* \
        "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old "$root"/var/log/* \
        "$root"/var/lib/dpkg/*-old "$root"/tmp/* "$root"/root/.cache
    find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias \
        -exec rm -rf {} +
    : >"$root/etc/machine-id"
    rm -f "$root/etc/hostname" "$root/etc/resolv.conf"
    # Fail here, not in a sandbox: the agent needs these modules.
    chroot "$root" python3 -c 'import json, zipfile, subprocess, ssl, sqlite3' \
        || die "python3 in the image lacks a standard module"
}

build_rootfs() {
    local tarball=$1 packages t0
    ensure_debootstrap
    packages=python3
    [ "$WITH_RG" = 1 ] && packages=python3,ripgrep
    mkdir -p "$CACHE_DIR"
    WORK=$(mktemp -d "$CACHE_DIR/work.XXXXXX")
    t0=$(now)
    say "debootstrap $RELEASE ($ARCH, minbase + $packages) from $MIRROR"
    if ! debootstrap --variant=minbase --arch="$ARCH" --components=main \
        --include="$packages" "$RELEASE" "$WORK/root" "$MIRROR" >"$WORK/debootstrap.log" 2>&1; then
        tail -n 20 "$WORK/debootstrap.log" >&2
        [ -f "$WORK/root/debootstrap/debootstrap.log" ] \
            && tail -n 20 "$WORK/root/debootstrap/debootstrap.log" >&2
        die "debootstrap failed"
    fi
    umount_below "$WORK/root"
    say "debootstrap done in $(since "$t0")"
    customise "$WORK/root"
    tar --numeric-owner -C "$WORK/root" -cf "$tarball.tmp" .
    mv -f "$tarball.tmp" "$tarball"
    cleanup
    WORK=""
}

[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot)"
RELEASE=${RELEASE:-$(detect_release)}
NUMBER=$(release_number "$RELEASE")
MIRROR=${MIRROR:-$(detect_mirror "$RELEASE")}
ARCH=$(dpkg --print-architecture)
SUFFIX=""
[ "$WITH_RG" = 1 ] && SUFFIX=-ripgrep
TAG=${TAG:-sandkit/base:debian$NUMBER$SUFFIX}
TARBALL="$CACHE_DIR/rootfs-$RELEASE-$ARCH$SUFFIX-r$RECIPE.tar"
ensure_tools

START=$(now)
mkdir -p "$CACHE_DIR"
exec 9>"$CACHE_DIR/build.lock"
flock 9

if [ "$FORCE" = 0 ] && docker image inspect "$TAG" >/dev/null 2>&1; then
    say "$TAG already exists (use --force to re-import, --refresh to re-bootstrap)"
    echo "$TAG"
    exit 0
fi

if [ "$REFRESH" = 1 ] || [ ! -s "$TARBALL" ]; then
    build_rootfs "$TARBALL"
else
    say "using cached root filesystem $TARBALL"
fi

OLD_ID=$(docker image inspect --format '{{.Id}}' "$TAG" 2>/dev/null || true)
RG_LABEL=false
[ "$WITH_RG" = 1 ] && RG_LABEL=true
T0=$(now)
docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'WORKDIR /' \
    --change 'CMD ["python3"]' \
    --change "LABEL org.opencontainers.image.title=sandkit-base" \
    --change "LABEL org.opencontainers.image.description=\"Debian $RELEASE minbase with python3\"" \
    --change "LABEL sandkit.base.release=$RELEASE sandkit.base.ripgrep=$RG_LABEL" \
    --change "LABEL sandkit.base.recipe=$RECIPE" \
    --message "sandkit base image: debootstrap $RELEASE minbase + python3" \
    "$TARBALL" "$TAG" >/dev/null
# A re-import leaves the previous image untagged; drop it unless something still uses it.
if [ -n "$OLD_ID" ] && [ "$OLD_ID" != "$(docker image inspect --format '{{.Id}}' "$TAG")" ]; then
    docker rmi "$OLD_ID" >/dev/null 2>&1 || true
fi
SIZE=$(docker image inspect --format '{{.Size}}' "$TAG")
say "imported in $(since "$T0"); $TAG is $((SIZE / 1000000)) MB; total $(since "$START")"
echo "$TAG"
