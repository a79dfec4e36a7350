#!/usr/bin/env bash
# Checks the Helm chart (helm/mcpcancel) and the Dockerfile without a
# cluster or a registry: helm lint --strict, then the deploy/charttest
# module's tests, which render the chart for each scenario, decode every
# object strictly and assert its invariants.
#
# Installs helm from source with go install into a versioned directory
# under GOPATH once; later runs reuse it. HELM=/path/to/helm skips that.
set -euo pipefail
cd "$(dirname "$0")/.."

HELM_VERSION=v3.22.0
if [ -z "${HELM:-}" ]; then
  dir="$(go env GOPATH)/tools/helm-$HELM_VERSION"
  HELM="$dir/helm"
  if ! go version -m "$HELM" 2>/dev/null | grep -q "helm.sh/helm/v3[[:space:]]*$HELM_VERSION"; then
    echo "+ go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION (once; it takes a few minutes)"
    GOBIN="$dir" go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  fi
fi
export HELM

echo "+ helm lint --strict helm/mcpcancel"
"$HELM" lint --strict helm/mcpcancel

cd deploy/charttest
echo "+ (deploy/charttest) go vet ./... && go test -count=1 ./..."
go vet ./...
go test -count=1 -timeout 10m ./...
