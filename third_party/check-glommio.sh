#!/usr/bin/env bash
# Checks that third_party/glommio is glommio 0.9.0 as published on crates.io with
# third_party/glommio/patches/*.patch applied, and nothing else: the crate is fetched
# with cargo (its checksum checked against the registry's index), the patches applied
# with `patch`, and the result compared with this copy file by file. Beside the crate's
# files the copy holds only the patches, their notes (CORELOG_PATCH.md) and liburing's
# .gitignore. Run by .ci/run; needs cargo's access to crates.io.
#
# After changing the copy: regenerate the patch (the diff of src/ against the pristine
# crate, `diff -ruN a/src b/src`, timestamps stripped) and run this script.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/p/src"
touch "$tmp/p/src/lib.rs"
cat >"$tmp/p/Cargo.toml" <<'TOML'
[package]
name = "glommio-pristine"
version = "0.0.0"
edition = "2021"

[dependencies]
glommio = "=0.9.0"

[workspace]
TOML
(cd "$tmp/p" && cargo vendor -q --versioned-dirs "$tmp/v" >/dev/null)
up="$tmp/v/glommio-0.9.0"
rm -f "$up/.cargo-checksum.json"
for p in glommio/patches/*.patch; do
  patch -s -p1 -d "$up" --no-backup-if-mismatch <"$p" || { echo "check-glommio: $p does not apply to glommio 0.9.0" >&2; exit 1; }
done
if ! diff -r -x patches -x CORELOG_PATCH.md -x .gitignore "$up" glommio >"$tmp/diff"; then
  echo "check-glommio: third_party/glommio is not glommio 0.9.0 + patches/*.patch:" >&2
  head -n 60 "$tmp/diff" >&2
  exit 1
fi
echo "third_party/glommio = glommio 0.9.0 (crates.io) + $(ls glommio/patches/*.patch | wc -l) patch(es), $(grep -c '^@@' glommio/patches/*.patch | awk -F: '{s += $NF} END {print s}') hunks"
