package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/version"
)

// TestVersionBinary: the release the build stamped is what `mcpcancel
// version` prints first, and --json says the same with the wire and
// schema versions.
func TestVersionBinary(t *testing.T) {
	out, err := runBinary(t, "version")
	if err != nil || !strings.HasPrefix(out, "mcpcancel "+testVersion+"\n") {
		t.Fatalf("version = %q, %v; want it to start %q", out, err, "mcpcancel "+testVersion)
	}
	inOrder(t, "version", out, []string{"commit:", "go:      go", "wire:    mcpcancel.v1", "schema:  1"})
	out, err = runBinary(t, "version", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var info version.Info
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("version --json = %q: %v", out, err)
	}
	if info.Release != testVersion || info.Wire != "mcpcancel.v1" || info.Schema != version.Schema {
		t.Errorf("version --json = %+v", info)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(b)
}

// TestAdminVersion: a component's admin port serves the build as JSON at
// /version and as the mcpcancel_build_info gauge beside its own metrics.
func TestAdminVersion(t *testing.T) {
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nowhere := gone.Addr().String()
	gone.Close()
	w := start(t, nil, "worker", "--coordinator", nowhere, "--demo", "--name", "v", "--admin", "127.0.0.1:0")
	admin := "http://" + w.waitLine(t, "admin: ")
	var info version.Info
	if err := json.Unmarshal([]byte(get(t, admin+"/version")), &info); err != nil {
		t.Fatal(err)
	}
	if info.Release != testVersion || info.Wire != "mcpcancel.v1" || info.Schema != version.Schema {
		t.Errorf("/version = %+v", info)
	}
	metrics := get(t, admin+"/metrics")
	want := `mcpcancel_build_info{goversion="` + info.Go + `",revision="` + info.Commit + `",schema="1",version="` + testVersion + `",wire="mcpcancel.v1"} 1`
	if !strings.Contains(metrics, want) || !strings.Contains(metrics, "mcpcancel_worker_") {
		t.Errorf("/metrics lacks %s or the worker's own metrics", want)
	}
}

// TestCoordinatorRefusesNewerSchema: a coordinator on a keyspace written
// by a newer release exits, saying which schema it found and which it
// knows, not that it could not read etcd.
func TestCoordinatorRefusesNewerSchema(t *testing.T) {
	etcd := etcdtest.Single(t)
	if _, err := etcd.Client().Put(t.Context(), "/mcpcancel/v1/schema", "2"); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := Main(t.Context(), []string{"coordinator", "--listen", "127.0.0.1:0", "--etcd", strings.Join(etcd.Endpoints(), ",")}, &stdout, &stderr)
	if code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	inOrder(t, "stderr", stderr.String(), []string{"mcpcancel coordinator: ", "/mcpcancel/v1/ is at schema 2", "knows schema 1 at most", "docs/upgrade.md"})
	if strings.Contains(stderr.String(), "cannot read") {
		t.Errorf("stderr blames etcd:\n%s", stderr.String())
	}
}
