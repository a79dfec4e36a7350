package testcluster

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/gateway"
)

// AuditPrefix is where the coordinator's default prefix keeps the audit.
const AuditPrefix = "/mcpcancel/v1/audit/"

// StartGateway runs a gateway (and its tool watch) behind an HTTP test
// server on loopback and returns it with its MCP endpoint URL. opts'
// Coordinator is set to coord, the connection to the coordinators.
func StartGateway(t testing.TB, coord grpc.ClientConnInterface, opts gateway.Options) (*gateway.Gateway, string) {
	t.Helper()
	opts.Coordinator = coord
	g := gateway.New(opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.Run(ctx) }()
	srv := httptest.NewServer(g.Mux())
	t.Cleanup(func() {
		g.Close()
		srv.CloseClientConnections()
		srv.Close()
		cancel()
		<-done
	})
	return g, srv.URL + "/mcp"
}

// Audits reads every audit record straight from etcd, by call id, in the
// order they were settled.
func Audits(t testing.TB, cli *clientv3.Client) map[string][]*coordinator.AuditRecord {
	t.Helper()
	resp, err := cli.Get(context.Background(), AuditPrefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]*coordinator.AuditRecord{}
	for _, kv := range resp.Kvs {
		var a coordinator.AuditRecord
		if err := json.Unmarshal(kv.Value, &a); err != nil {
			t.Fatal(err)
		}
		out[a.CallID] = append(out[a.CallID], &a)
	}
	return out
}

// WaitFor polls cond every few milliseconds until it holds, failing the
// test after 15 s.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// PostMCP POSTs one JSON-RPC message to a Streamable HTTP endpoint, with
// a bearer token and a session id when they are not empty, and returns
// the response with its whole body.
func PostMCP(t testing.TB, url, token, session, body string) (*http.Response, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}
