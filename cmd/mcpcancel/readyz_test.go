package main

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/tlsconfig"
	"github.com/mcpcancel/mcpcancel/internal/tlsconfig/testpki"
)

// getReadyz GETs /readyz on an admin address.
func getReadyz(t *testing.T, admin string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestReadyzFollowsGRPCHealth: under mTLS, where kubelet's gRPC probe
// cannot present a client certificate, the admin port's /readyz follows
// the process's own gRPC health: a worker with no coordinator is not
// ready (503, NOT_SERVING); a coordinator and an attached worker are.
func TestReadyzFollowsGRPCHealth(t *testing.T) {
	ca := testpki.NewCA(t, "mcpcancel")
	tlsArgs := func(role, name string) []string {
		f := ca.Issue(t, role, name)
		return []string{"--tls-cert", f.Cert, "--tls-key", f.Key, "--tls-ca", f.CA}
	}
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nowhere := gone.Addr().String()
	gone.Close()
	lonely := start(t, nil, append([]string{"worker", "--coordinator", nowhere, "--demo", "--name", "lonely", "--admin", "127.0.0.1:0"}, tlsArgs(tlsconfig.RoleWorker, "lonely")...)...)
	if code, body := getReadyz(t, lonely.waitLine(t, "admin: ")); code != http.StatusServiceUnavailable || !strings.Contains(body, "NOT_SERVING") {
		t.Errorf("a worker with no coordinator: /readyz %d %q, want 503 saying NOT_SERVING", code, body)
	}

	etcd := etcdtest.Single(t)
	coord := start(t, nil, append([]string{"coordinator", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--etcd", strings.Join(etcd.Endpoints(), ",")}, tlsArgs(tlsconfig.RoleCoordinator, "coord")...)...)
	coordAddr := coord.waitLine(t, "coordinator: ")
	coordAdmin := coord.waitLine(t, "admin: ")
	poll(t, "the coordinator ready", func() bool { code, _ := getReadyz(t, coordAdmin); return code == http.StatusOK })

	wk := start(t, nil, append([]string{"worker", "--coordinator", coordAddr, "--demo", "--name", "w1", "--admin", "127.0.0.1:0"}, tlsArgs(tlsconfig.RoleWorker, "w1")...)...)
	wkAdmin := wk.waitLine(t, "admin: ")
	poll(t, "the worker ready once attached", func() bool { code, _ := getReadyz(t, wkAdmin); return code == http.StatusOK })
}
