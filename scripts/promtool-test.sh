#!/usr/bin/env bash
# Checks mcpcancel's alerting rules offline with Prometheus' own promtool:
# promtool check rules on helm/mcpcancel/dashboards/mcpcancel.rules.yaml,
# then promtool test rules on deploy/alerts-test/ (series that fire each
# alert and series that do not).
#
# Installs promtool from source with go install into a versioned directory
# under GOPATH once (it takes a few minutes); later runs reuse it.
# PROMTOOL=/path/to/promtool skips that.
set -euo pipefail
cd "$(dirname "$0")/.."

PROMETHEUS_VERSION=v0.316.0 # the Go module version of Prometheus v3.16.0
if [ -z "${PROMTOOL:-}" ]; then
  dir="$(go env GOPATH)/tools/promtool-$PROMETHEUS_VERSION"
  PROMTOOL="$dir/promtool"
  if ! go version -m "$PROMTOOL" 2>/dev/null | grep -q "github.com/prometheus/prometheus[[:space:]]*$PROMETHEUS_VERSION"; then
    echo "+ go install github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_VERSION (once; it takes a few minutes)"
    GOBIN="$dir" go install "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_VERSION"
  fi
fi

echo "+ promtool check rules helm/mcpcancel/dashboards/mcpcancel.rules.yaml"
"$PROMTOOL" check rules helm/mcpcancel/dashboards/mcpcancel.rules.yaml

echo "+ promtool test rules deploy/alerts-test/*.test.yaml"
"$PROMTOOL" test rules deploy/alerts-test/*.test.yaml
