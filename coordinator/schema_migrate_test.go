package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
)

// TestMigrateSchema runs a migration from schema 1 to 2, as the janitor's
// leader will when a release raises version.Schema: it commits with the
// new version only while its leadership, the version and the candidates
// it read all hold, and never while a coordinator speaks schema 1.
func TestMigrateSchema(t *testing.T) {
	for _, tc := range []struct {
		name    string
		others  []int // the schemas other candidates speak
		deposed bool  // the leader lost its leadership before migrating
		join    bool  // a candidate joins while the migration runs
		want    error
		done    bool
	}{
		{name: "every candidate speaks 2", others: []int{2}, done: true},
		{name: "a candidate speaks 1", others: []int{2, 1}},
		{name: "a deposed leader", deposed: true, want: ErrMigrationFenced},
		{name: "a candidate joins meanwhile", join: true, want: ErrMigrationFenced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli := etcdtest.Single(t).Client()
			s := New(Options{Client: cli})
			ctx := t.Context()
			if _, err := cli.Put(ctx, s.keys.schema(), "1"); err != nil {
				t.Fatal(err)
			}
			for i, v := range tc.others {
				putCandidate(t, cli, s.keys.election()+"other-"+string(rune('a'+i)), v)
			}
			sess, err := concurrency.NewSession(cli)
			if err != nil {
				t.Fatal(err)
			}
			defer sess.Close()
			el := concurrency.NewElection(sess, s.keys.election())
			if err := el.Campaign(ctx, `{"name":"leader","schema":2}`); err != nil {
				t.Fatal(err)
			}
			if tc.deposed { // its session expired: its key is gone
				if _, err := cli.Revoke(ctx, sess.Lease()); err != nil {
					t.Fatal(err)
				}
			}
			migrated := s.opts.Prefix + "migrated"
			steps := map[int]migration{1: func(ctx context.Context, _ *Server, _ int64) ([]clientv3.Cmp, []clientv3.Op, error) {
				if tc.join {
					putCandidate(t, cli, s.keys.election()+"late", 1)
				}
				return nil, []clientv3.Op{clientv3.OpPut(migrated, "yes")}, nil
			}}
			done, err := s.migrateSchema(ctx, el, 2, steps)
			if done != tc.done || !errors.Is(err, tc.want) {
				t.Fatalf("migrateSchema = %v, %v; want %v, %v", done, err, tc.done, tc.want)
			}
			resp, err := cli.Txn(ctx).Then(clientv3.OpGet(s.keys.schema()), clientv3.OpGet(migrated)).Commit()
			if err != nil {
				t.Fatal(err)
			}
			schema, mig := resp.Responses[0].GetResponseRange().Kvs[0], resp.Responses[1].GetResponseRange().Kvs
			switch {
			case tc.done && (string(schema.Value) != "2" || len(mig) != 1 || mig[0].ModRevision != schema.ModRevision):
				t.Errorf("schema %q, migration's write %v: want both in one Txn", schema.Value, mig)
			case !tc.done && (string(schema.Value) != "1" || len(mig) != 0):
				t.Errorf("schema %q, migration's write %v: want neither", schema.Value, mig)
			}
		})
	}
}

func putCandidate(t *testing.T, cli *clientv3.Client, key string, schema int) {
	t.Helper()
	b, _ := json.Marshal(candidate{Name: key, Schema: schema})
	if _, err := cli.Put(t.Context(), key, string(b)); err != nil {
		t.Fatal(err)
	}
}
