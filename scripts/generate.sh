#!/usr/bin/env bash
# Lints proto/ and regenerates api/ from it with buf and the pinned
# protoc plugins. The plugins are installed into a temporary GOBIN, so
# nothing outside the module cache is touched.
set -euo pipefail
cd "$(dirname "$0")/.."

readonly PROTOC_GEN_GO=google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
readonly PROTOC_GEN_GO_GRPC=google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.0
readonly BUF=github.com/bufbuild/buf/cmd/buf@v1.75.0

gobin=$(mktemp -d)
trap 'rm -rf "$gobin"' EXIT
GOBIN="$gobin" go install "$PROTOC_GEN_GO"
GOBIN="$gobin" go install "$PROTOC_GEN_GO_GRPC"
export PATH="$gobin:$PATH"

echo "+ buf lint"
go run "$BUF" lint
echo "+ buf generate"
go run "$BUF" generate
