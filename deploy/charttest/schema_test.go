package charttest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSchemaRejects: values.schema.json turns away bad values, each with a
// schema error that names the offending value, for helm template and lint.
func TestSchemaRejects(t *testing.T) {
	cases := []struct {
		name, values, want string
	}{
		{"unknown top-level key", "gatway:\n  replicas: 2\n", "gatway"},
		{"unknown nested key", "coordinator:\n  replica: 3\n", "replica"},
		{"wrong type", "gateway:\n  replicas: two\n", "replicas"},
		{"replicas below 1", "coordinator:\n  replicas: 0\n", "replicas"},
		{"fleet replicas below 1", "workers:\n  - name: demo\n    demo: true\n    replicas: 0\n", "replicas"},
		{"fleet name not a DNS label", "workers:\n  - name: Demo_Fleet\n    demo: true\n", "name"},
		{"fleet with no tools", "workers:\n  - name: idle\n", "workers"},
		{"fleet with two kinds of tools", "workers:\n  - name: both\n    demo: true\n    upstreamStdio: server\n", "workers"},
		{"bad upstream tool option", "workers:\n  - name: up\n    upstreamStdio: server\n    upstreamConfig:\n      tools:\n        echo: {timeout: soon}\n", "timeout"},
		{"no worker fleet", "workers: []\n", "workers"},
		{"no etcd", "etcd:\n  endpoints: []\n", "endpoints"},
		{"etcd endpoint without scheme", "etcd:\n  endpoints: [etcd:2379]\n", "endpoints"},
		{"etcd client TLS to an http endpoint", "etcd:\n  endpoints: [http://etcd:2379]\n  tls: {secretName: etcd-client}\n", "endpoints"},
		{"embedded etcd with an even member count", "etcd:\n  embedded:\n    enabled: true\n    replicas: 2\n    image: {registry: r.example}\n", "replicas"},
		{"bad log level", "logLevel: verbose\n", "logLevel"},
		{"bad duration", "coordinator:\n  retention: 1 day\n", "retention"},
		{"port out of range", "gateway:\n  port: 70000\n", "port"},
		{"extra arg not a flag", "gateway:\n  extraArgs: [debug]\n", "extraArgs"},
		{"unknown auth policy key", "gateway:\n  auth:\n    policy: {scopes: [mcp]}\n", "scopes"},
		{"public URL not a URL", "gateway:\n  auth:\n    publicURL: mcp.example.com\n", "publicURL"},
		{"extra volume mount without a path", "gateway:\n  extraVolumeMounts: [{name: x}]\n", "mountPath"},
	}
	dir := t.TempDir()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+".yaml")
			if err := os.WriteFile(file, []byte(c.values), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, args := range [][]string{
				templateArgs([]string{file}),
				{"lint", "--strict", chartDir, "-f", file},
			} {
				out, err := helm(t, args...)
				if err == nil {
					t.Fatalf("helm %s accepted %q", args[0], c.values)
				}
				msg := err.Error() + out
				if !strings.Contains(msg, "values don't meet the specifications of the schema") || !strings.Contains(msg, c.want) {
					t.Errorf("helm %s: want a schema error about %s, got:\n%s", args[0], c.want, msg)
				}
			}
		})
	}
}

// TestTemplateRejects: what the schema cannot express, the templates refuse
// with a message that says what to set.
func TestTemplateRejects(t *testing.T) {
	cases := []struct {
		name string
		sets []string
		want string
	}{
		{"mTLS without certificates", []string{"tls.enabled=true"}, "tls.enabled needs tls."},
		{"cert-manager without an issuer", []string{"tls.enabled=true", "tls.certManager.enabled=true"}, "tls.certManager.issuerRef.name is required"},
		{"fleet name used twice", []string{"workers[0].name=a", "workers[0].demo=true", "workers[1].name=a", "workers[1].demo=true"}, `fleet name "a" is used twice`},
		{"etcd user without a password", []string{"etcd.auth.username=u"}, "etcd.auth.passwordSecret is required"},
		{"JWKS without an issuer", []string{"gateway.auth.jwksSecret=jwks"}, "gateway.auth.jwksSecret needs gateway.auth.jwtIssuer"},
		{"JWT issuer without an audience", []string{"gateway.auth.jwtIssuer=https://idp.example.com"}, "gateway.auth.jwtIssuer needs gateway.auth.publicURL"},
		{"two auth policies", []string{"gateway.auth.policy.required[0]=mcp", "gateway.auth.policyConfigMap=p"}, "set one of gateway.auth.policy and gateway.auth.policyConfigMap"},
		{"embedded etcd without a registry", []string{"etcd.embedded.enabled=true", "etcd.embedded.image.registry="}, "registry"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := helm(t, templateArgs(nil, c.sets...)...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("helm template --set %v: want an error with %q, got %v", c.sets, c.want, err)
			}
		})
	}
}
