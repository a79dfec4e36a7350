package gateway_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/gateway"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
)

// /readyz means calls can be decided now: ready while the coordinator
// reaches etcd, 503 saying so while etcd is down (the coordinator itself
// still answers), and ready again when etcd is back.
func TestReadyzFollowsTheCoordinatorsHealth(t *testing.T) {
	etcd := etcdtest.StartRestartable(t)
	co := testcluster.StartCoordinator(t, etcd.Client(), coordinator.Options{HealthInterval: 50 * time.Millisecond, OpTimeout: time.Second})
	conn := testcluster.Conn(t, co.Addr)
	g := gateway.New(gateway.Options{Coordinator: conn})
	t.Cleanup(func() { g.Close() })
	srv := httptest.NewServer(g.Mux())
	t.Cleanup(srv.Close)
	readyz := func() (int, string) {
		resp, err := http.Get(srv.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	testcluster.WaitFor(t, "ready", func() bool { code, _ := readyz(); return code == http.StatusOK })

	etcd.Stop()
	testcluster.WaitFor(t, "not ready with etcd down", func() bool { code, _ := readyz(); return code == http.StatusServiceUnavailable })
	if _, body := readyz(); !strings.Contains(body, "cannot decide calls") {
		t.Fatalf("/readyz with etcd down says %q", body)
	}

	etcd.Start()
	testcluster.WaitFor(t, "ready again", func() bool { code, _ := readyz(); return code == http.StatusOK })
}
