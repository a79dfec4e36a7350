package coordinator_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/internal/version"
)

const schemaKey = prefix + "schema"

func getSchema(t *testing.T, cli *clientv3.Client) *clientv3.GetResponse {
	t.Helper()
	resp, err := cli.Get(t.Context(), schemaKey)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// runErr runs a replica until it stops by itself or the test ends; wait
// returns what its Run returned (within a deadline).
func runErr(t *testing.T, cli *clientv3.Client, name string) (srv *coordinator.Server, wait func() error) {
	t.Helper()
	srv = coordinator.New(coordinator.Options{Client: cli, Name: name, LeaseTTL: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var err error
	go func() { // waited for by wait, and by the cleanup
		defer close(done)
		err = srv.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return srv, func() error {
		select {
		case <-done:
			return err
		case <-time.After(30 * time.Second):
			t.Fatal("Run did not return")
			return nil
		}
	}
}

func waitReady(t *testing.T, srv *coordinator.Server) {
	t.Helper()
	select {
	case <-srv.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("the replica did not become ready")
	}
}

// TestSchemaFreshKeyspace: a coordinator on an empty keyspace records
// the schema it speaks before it is ready.
func TestSchemaFreshKeyspace(t *testing.T) {
	cli := etcdtest.Single(t).Client()
	testcluster.StartCoordinator(t, cli, coordinator.Options{})
	kvs := getSchema(t, cli).Kvs
	if len(kvs) != 1 || string(kvs[0].Value) != "1" || version.Schema != 1 {
		t.Fatalf("schema key %v after the first start, want %q", kvs, "1")
	}
}

// TestSchemaWrittenOnce: replicas starting together on an empty keyspace
// write its schema version once, and all of them serve.
func TestSchemaWrittenOnce(t *testing.T) {
	cli := etcdtest.Single(t).Client()
	ctx, cancel := context.WithCancel(t.Context())
	var g errgroup.Group
	ready := make(chan struct{}, 3)
	for _, name := range []string{"a", "b", "c"} {
		srv := coordinator.New(coordinator.Options{Client: cli, Name: name})
		g.Go(func() error { return srv.Run(ctx) })
		g.Go(func() error {
			select {
			case <-srv.Ready():
				ready <- struct{}{}
			case <-ctx.Done():
			}
			return nil
		})
	}
	for range 3 {
		select {
		case <-ready:
		case <-time.After(30 * time.Second):
			t.Error("a replica did not become ready")
		}
	}
	cancel()
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	kvs := getSchema(t, cli).Kvs
	if len(kvs) != 1 || string(kvs[0].Value) != "1" || kvs[0].Version != 1 {
		t.Fatalf("schema key %v, want %q written once (version 1)", kvs, "1")
	}
}

// TestSchemaTooNew: a coordinator that finds a schema newer than it knows
// refuses to serve, and says which schema it found and which it knows;
// a running one stops when the schema passes its own.
func TestSchemaTooNew(t *testing.T) {
	cli := etcdtest.Single(t).Client()
	t.Run("at start", func(t *testing.T) {
		if _, err := cli.Put(t.Context(), schemaKey, "2"); err != nil {
			t.Fatal(err)
		}
		srv, wait := runErr(t, cli, "old")
		err := wait()
		if !errors.Is(err, coordinator.ErrSchemaTooNew) || !strings.Contains(err.Error(), "is at schema 2") || !strings.Contains(err.Error(), "knows schema 1 at most") {
			t.Fatalf("Run = %v, want ErrSchemaTooNew naming schemas 2 and 1", err)
		}
		select {
		case <-srv.Ready():
			t.Error("ready although it refused to serve")
		default:
		}
	})
	t.Run("while running", func(t *testing.T) {
		if _, err := cli.Put(t.Context(), schemaKey, "1"); err != nil {
			t.Fatal(err)
		}
		srv, wait := runErr(t, cli, "old")
		waitReady(t, srv)
		if _, err := cli.Put(t.Context(), schemaKey, "2"); err != nil {
			t.Fatal(err)
		}
		if err := wait(); !errors.Is(err, coordinator.ErrSchemaTooNew) {
			t.Fatalf("Run = %v after the schema moved to 2, want ErrSchemaTooNew", err)
		}
	})
}
