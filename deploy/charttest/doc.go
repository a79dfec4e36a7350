// Package charttest checks the Helm chart in helm/mcpcancel and the
// Dockerfile without a cluster: it renders the chart with helm for the
// scenarios in testdata, decodes every rendered document strictly into its
// Kubernetes type, and asserts the chart's invariants on the objects (probes,
// non-root pods, where etcd credentials go, the workers' advertised address,
// grace periods no shorter than the drain flags, every file a flag names
// mounted from a volume of the pod, and that every flag the chart passes
// exists in the mcpcancel binary). The helm commands and values examples
// of the docs are rendered and checked the same way.
//
// It is a module of its own so the product's go.mod stays free of k8s.io.
// Run it with scripts/chart-test.sh, which installs helm; or with
// HELM=/path/to/helm go test ./... here.
package charttest
