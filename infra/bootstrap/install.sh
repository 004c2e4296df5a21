#!/usr/bin/env bash
# infra/bootstrap/install.sh — put the corelog binaries on a node, one of two ways:
#   1. CORELOG_RELEASE_URL (+ CORELOG_RELEASE_SHA256): download a .tar.gz with the x86_64 Linux
#      binaries `corelog` and `corelog-loadgen`, check its SHA-256, install them.
#   2. otherwise CORELOG_GIT_URL at CORELOG_GIT_REV: install rustup (RUST_TOOLCHAIN, default
#      stable), clone, `cargo build --release --locked` of the package this node needs
#      (corelog-server on data nodes, corelog-loadgen on load generators), install.
# Binaries go to /usr/local/bin; /etc/corelog/build-info records what was installed.
# CORELOG_ROLE=leader|follower|loadgen picks the package. CORELOG_RUSTFLAGS is passed to cargo
# as RUSTFLAGS (empty by default: the published numbers use a plain release build).
set -euo pipefail

ROLE="${CORELOG_ROLE:?CORELOG_ROLE must be leader, follower or loadgen}"
PREFIX="${CORELOG_PREFIX:-/usr/local}"
SRC_DIR="${CORELOG_SRC_DIR:-/opt/corelog/src}"
export RUSTUP_HOME="${RUSTUP_HOME:-/opt/rust/rustup}"
export CARGO_HOME="${CARGO_HOME:-/opt/rust/cargo}"
TOOLCHAIN="${RUST_TOOLCHAIN:-stable}"

say() { echo "install.sh: $*"; }
case "$ROLE" in
  leader|follower) PACKAGE=corelog-server; BINARIES=(corelog) ;;
  loadgen) PACKAGE=corelog-loadgen; BINARIES=(corelog-loadgen) ;;
  *) echo "install.sh: unknown role $ROLE" >&2; exit 2 ;;
esac

export DEBIAN_FRONTEND=noninteractive
apt_install() { apt-get install -y -q --no-install-recommends "$@" >/dev/null; }
apt-get update -q >/dev/null
apt_install ca-certificates curl

mkdir -p /etc/corelog
if [ -n "${CORELOG_RELEASE_URL:-}" ]; then
  : "${CORELOG_RELEASE_SHA256:?CORELOG_RELEASE_SHA256 is required with CORELOG_RELEASE_URL}"
  tmp="$(mktemp -d)"
  say "downloading $CORELOG_RELEASE_URL"
  curl --proto '=https' --tlsv1.2 -fsSL --retry 5 -o "$tmp/corelog.tar.gz" "$CORELOG_RELEASE_URL"
  echo "$CORELOG_RELEASE_SHA256  $tmp/corelog.tar.gz" | sha256sum -c --quiet -
  tar -xzf "$tmp/corelog.tar.gz" -C "$tmp"
  for b in "${BINARIES[@]}"; do
    found="$(find "$tmp" -type f -name "$b" | head -n 1)"
    [ -n "$found" ] || { echo "install.sh: $b not in the archive" >&2; exit 1; }
    install -m 0755 "$found" "$PREFIX/bin/$b"
  done
  rm -rf "$tmp"
  printf 'source=release\nurl=%s\nsha256=%s\n' "$CORELOG_RELEASE_URL" "$CORELOG_RELEASE_SHA256" >/etc/corelog/build-info
else
  : "${CORELOG_GIT_URL:?set CORELOG_GIT_URL or CORELOG_RELEASE_URL}"
  REV="${CORELOG_GIT_REV:-main}"
  apt_install build-essential pkg-config git
  if [ ! -x "$CARGO_HOME/bin/cargo" ]; then
    say "installing rustup ($TOOLCHAIN)"
    curl --proto '=https' --tlsv1.2 -fsSL --retry 5 https://sh.rustup.rs \
      | sh -s -- -y --no-modify-path --profile minimal --default-toolchain "$TOOLCHAIN" >/dev/null
  fi
  export PATH="$CARGO_HOME/bin:$PATH"
  if [ ! -d "$SRC_DIR/.git" ]; then git clone --quiet "$CORELOG_GIT_URL" "$SRC_DIR"; fi
  git -C "$SRC_DIR" fetch --quiet --tags origin
  git -C "$SRC_DIR" checkout --quiet --detach "$REV" 2>/dev/null \
    || git -C "$SRC_DIR" checkout --quiet --detach "origin/$REV"
  commit="$(git -C "$SRC_DIR" rev-parse HEAD)"
  say "building $PACKAGE at $commit"
  (cd "$SRC_DIR" && RUSTFLAGS="${CORELOG_RUSTFLAGS:-}" cargo build --quiet --release --locked -p "$PACKAGE")
  for b in "${BINARIES[@]}"; do install -m 0755 "$SRC_DIR/target/release/$b" "$PREFIX/bin/$b"; done
  printf 'source=git\nurl=%s\nrev=%s\ncommit=%s\nrustc=%s\nrustflags=%s\n' "$CORELOG_GIT_URL" "$REV" "$commit" \
    "$(rustc --version)" "${CORELOG_RUSTFLAGS:-}" >/etc/corelog/build-info
fi
for b in "${BINARIES[@]}"; do say "installed $PREFIX/bin/$b"; done
