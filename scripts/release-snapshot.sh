#!/usr/bin/env bash
# Builds a snapshot release offline, publishing nothing: what a tag builds
# in .github/workflows/release.yml, less the signatures and provenance
# (they need the CI host's identity). In dist/:
#
#   mcpcancel_<V>_{linux,darwin}_{amd64,arm64}.tar.gz   archives (goreleaser)
#   mcpcancel_<V>_<os>_<arch>.cdx.json                  CycloneDX SBOMs
#   checksums.txt                                       sha256 of them all
#   mcpcancel_<V>_oci/                                  the image, an OCI layout
#                                                       (linux/amd64 and arm64)
#
# then takes the linux/amd64 binary out of the image and checks that it
# runs and prints the snapshot's version and this commit. First it lints
# the publish workflow (.github/workflows/release.yml) with actionlint;
# shellcheck is left out so the result does not depend on the host.
#
# V is the successor of the last release recorded in CHANGELOG.md
# (v0.1.1-snapshot.<commit> after v0.1.0), or, before the first one,
# v0.1.0-snapshot.<commit>. Set SNAPSHOT_VERSION (no "v") to choose.
#
# goreleaser and cyclonedx-gomod are built from source with go install
# into versioned directories under $(go env GOPATH)/tools once, like
# helm in scripts/chart-test.sh; later runs reuse them. GORELEASER=path
# skips building goreleaser.
set -euo pipefail
cd "$(dirname "$0")/.."

# v2.17.0: the newest goreleaser whose go.mod accepts Go 1.26 (v2.18
# needs Go 1.27.1).
readonly GORELEASER_VERSION=v2.17.0
readonly CYCLONEDX_VERSION=v1.10.0
readonly ACTIONLINT=github.com/rhysd/actionlint/cmd/actionlint@v1.7.12
tools="$(go env GOPATH)/tools"

# tool PKG VERSION NAME: the path of NAME built from PKG@VERSION.
tool() {
  local dir="$tools/$3-$2"
  if ! go version -m "$dir/$3" 2>/dev/null | grep -q "[[:space:]]$2\([[:space:]]\|$\)"; then
    echo "+ go install $1@$2 (once)" >&2
    GOBIN="$dir" go install "$1@$2"
  fi
  echo "$dir/$3"
}

echo "+ actionlint .github/workflows/release.yml"
go run "$ACTIONLINT" -shellcheck= .github/workflows/release.yml

GORELEASER=${GORELEASER:-$(tool github.com/goreleaser/goreleaser/v2 "$GORELEASER_VERSION" goreleaser)}
cdx=$(tool github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod "$CYCLONEDX_VERSION" cyclonedx-gomod)
export PATH="$(dirname "$cdx"):$PATH"

# The version: the successor of the last release in CHANGELOG.md.
commit=$(git rev-parse HEAD)
short=$(git rev-parse --short=12 HEAD)
if [ -z "${SNAPSHOT_VERSION:-}" ]; then
  last=$(awk '/^## \[[0-9]/ { print substr($2, 2, length($2) - 2); exit }' CHANGELOG.md)
  if [ -n "$last" ]; then
    IFS=. read -r major minor patch <<<"$last"
    SNAPSHOT_VERSION="$major.$minor.$((patch + 1))-snapshot.$short"
  else
    SNAPSHOT_VERSION="0.1.0-snapshot.$short"
  fi
fi
export SNAPSHOT_VERSION
version="v$SNAPSHOT_VERSION"
echo "snapshot $version at $commit"

# goreleaser reads the commit from git, but drops all of it, in a
# snapshot, when the clone has no remote (a fresh worktree); give it
# one for this process only, in the environment, not in .git/config.
if ! git remote get-url origin >/dev/null 2>&1; then
  export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=remote.origin.url \
    GIT_CONFIG_VALUE_0=https://github.com/mcpcancel/mcpcancel.git
fi
echo "+ goreleaser release --snapshot --clean"
"$GORELEASER" release --snapshot --clean --parallelism 2

# The image: the linux binaries goreleaser built, as an OCI layout.
layout="dist/mcpcancel_${SNAPSHOT_VERSION}_oci"
platforms=()
for arch in amd64 arm64; do
  b=$(ls dist/mcpcancel_linux_${arch}*/mcpcancel)
  platforms+=("linux/$arch=$PWD/$b")
done
echo "+ (scripts/ociimage) go vet ./... && ociimage build -o $layout"
(cd scripts/ociimage && go vet ./...)
(cd scripts/ociimage && go run . build -o "../../$layout" -version "$version" -revision "$commit" \
  -epoch "$(git log -1 --format=%ct HEAD)" "${platforms[@]}")
(cd dist && find "$(basename "$layout")" -type f | LC_ALL=C sort | xargs sha256sum >>checksums.txt)

# The image's binary runs and is this snapshot.
extracted="dist/image-mcpcancel"
(cd scripts/ociimage && go run . extract -platform linux/amd64 -o "../../$extracted" "../../$layout")
out=$("$extracted" version --json)
echo "image: mcpcancel version --json: $out"
case "$out" in
  *"\"version\":\"$version\""*"\"commit\":\"$commit\""*) ;;
  *) echo "release-snapshot: the image's binary is not $version at $commit" >&2; exit 1 ;;
esac
rm "$extracted"

# Every artifact the snapshot must have.
for os in linux darwin; do
  for arch in amd64 arm64; do
    for f in "mcpcancel_${SNAPSHOT_VERSION}_${os}_${arch}.tar.gz" "mcpcancel_${SNAPSHOT_VERSION}_${os}_${arch}.cdx.json"; do
      test -s "dist/$f" || { echo "release-snapshot: dist/$f is missing" >&2; exit 1; }
      grep -q "  $f\$" dist/checksums.txt || { echo "release-snapshot: $f has no checksum" >&2; exit 1; }
    done
  done
done
(cd dist && sha256sum --quiet -c checksums.txt)
ls -l dist/*.tar.gz dist/*.cdx.json dist/checksums.txt
echo "release-snapshot: $version built and checked"
