#!/usr/bin/env bash
# Checks that the API (proto/) makes no breaking change against the last
# release's protos, so that each role may run one release apart from the
# others (docs/upgrade.md). buf's FILE rules (buf.yaml) are the ones
# checked.
#
#   scripts/buf-breaking.sh [REF]
#
# REF is a git commit, tag or branch; by default the commit of the newest
# release recorded in CHANGELOG.md (its "Commit:" line). Before the first
# release is recorded it checks against HEAD, which passes, so that the
# check runs from the start. The commit must be in this clone (a shallow
# CI checkout needs `git fetch --unshallow` or a deeper fetch).
set -euo pipefail
cd "$(dirname "$0")/.."

readonly BUF=github.com/bufbuild/buf/cmd/buf@v1.75.0

# last_release prints "VERSION COMMIT" of the newest release in
# CHANGELOG.md, or nothing when none is recorded yet.
last_release() {
  awk '
    /^## \[[0-9]/ { if (version != "") exit; version = substr($2, 2, length($2) - 2); next }
    /^## / { if (version != "") exit }
    version != "" && /^Commit: [0-9a-f]+$/ && length($2) == 40 { print version, $2; exit }
  ' CHANGELOG.md
}

ref="${1:-}"
if [ -z "$ref" ]; then
  read -r version commit < <(last_release) || true
  if [ -n "${commit:-}" ]; then
    echo "last release: v$version at $commit (CHANGELOG.md)"
    ref=$commit
  else
    echo "no release recorded in CHANGELOG.md yet: checking against HEAD"
    ref=HEAD
  fi
fi
if ! git cat-file -e "$ref^{commit}" 2>/dev/null; then
  echo "buf-breaking: $ref is not a commit in this clone (fetch it, or unshallow the clone)" >&2
  exit 1
fi
sha=$(git rev-parse "$ref^{commit}")
echo "+ buf breaking proto --against '.git#ref=$sha,subdir=proto'"
go run "$BUF" breaking proto --against ".git#ref=$sha,subdir=proto"
echo "proto/: no breaking change against $ref"
