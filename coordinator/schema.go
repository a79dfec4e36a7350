package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/mcpcancel/mcpcancel/internal/backoff"
	"github.com/mcpcancel/mcpcancel/internal/version"
)

// The etcd keyspace's schema version (DESIGN §15, docs/upgrade.md).
//
// <prefix>schema holds the layout version of the keyspace, in decimal.
// This release speaks version.Schema, and serves a keyspace at that
// version or the one before it (a rolling upgrade runs two releases).
//   - A coordinator that starts on a keyspace without the key creates it,
//     in a Txn guarded by its absence, before it is ready: concurrent
//     starts write it once.
//   - One that finds a newer version, or one more than a version older,
//     refuses to serve (ErrSchemaTooNew, ErrSchemaTooOld), naming both.
//   - The janitor's leader migrates a keyspace one version behind, once
//     every coordinator campaigning speaks the new version: the
//     migration's writes and the new version go in one Txn fenced on its
//     leadership, on the version it read and on the candidates it read.
//   - A running coordinator that sees the version pass its own stops
//     (Run returns ErrSchemaTooNew): an older release that joined while
//     the leader migrated does not serve the new layout.
var (
	ErrSchemaTooNew    = errors.New("coordinator: the etcd keyspace's schema is newer than this release knows")
	ErrSchemaTooOld    = errors.New("coordinator: the etcd keyspace's schema is older than this release can migrate")
	ErrMigrationFenced = errors.New("coordinator: the schema migration lost its fence (the leadership, the version or the candidates changed)")
)

// A migration returns the writes (and the guards they need) that turn a
// keyspace, read at revision rev, from one schema version into the next.
type migration func(ctx context.Context, s *Server, rev int64) ([]clientv3.Cmp, []clientv3.Op, error)

// migrations holds the step from each version to the next, keyed by the
// version it migrates from. Each entry says the release that may drop it
// (the one after the release that introduced it). Schema 1 is the first.
var migrations = map[int]migration{}

// candidate is the value each coordinator campaigns with for the
// janitor, so the leader knows which schema every replica speaks.
type candidate struct {
	Name   string `json:"name"`
	Schema int    `json:"schema"`
}

func (s *Server) candidate() string {
	b, _ := json.Marshal(candidate{Name: s.opts.Name, Schema: version.Schema})
	return string(b)
}

// openSchema creates the schema key on a fresh keyspace, or checks the
// version it holds; it returns the revision it read at, from which
// watchSchema watches, and notes whether the keyspace awaits migration.
func (s *Server) openSchema(ctx context.Context) (int64, error) {
	v, rev, err := s.createSchema(ctx)
	s.schemaBehind.Store(v < version.Schema)
	return rev, err
}

// createSchema creates the schema key or reads and checks it.
func (s *Server) createSchema(ctx context.Context) (int, int64, error) {
	k := s.keys.schema()
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.cli.Txn(octx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, strconv.Itoa(version.Schema))).
		Else(clientv3.OpGet(k)).Commit()
	if err != nil {
		return 0, 0, etcdErr(octx, "read the schema version", err)
	}
	if resp.Succeeded {
		s.log.Info("schema: created the keyspace's schema version", "schema", version.Schema)
		return version.Schema, resp.Header.Revision, nil
	}
	v, err := s.parseSchema(resp.Responses[0].GetResponseRange().Kvs[0].Value)
	if err == nil {
		err = s.checkSchema(v, version.Schema)
	}
	return v, resp.Header.Revision, err
}

func (s *Server) parseSchema(b []byte) (int, error) {
	v, err := strconv.Atoi(string(b))
	if err != nil || v < 1 {
		return 0, fmt.Errorf("coordinator: %s holds %q, not a schema version", s.keys.schema(), b)
	}
	return v, nil
}

// checkSchema says whether a release that speaks schema want may serve a
// keyspace at version got.
func (s *Server) checkSchema(got, want int) error {
	switch {
	case got > want:
		return fmt.Errorf("%w: %s is at schema %d, and this coordinator (mcpcancel %s) knows schema %d at most; run a release that knows schema %d (docs/upgrade.md)",
			ErrSchemaTooNew, s.opts.Prefix, got, version.Release(), want, got)
	case got < want-1:
		return fmt.Errorf("%w: %s is at schema %d, and this coordinator (mcpcancel %s) migrates from schema %d only; upgrade one release at a time (docs/upgrade.md)",
			ErrSchemaTooOld, s.opts.Prefix, got, version.Release(), want-1)
	}
	return nil
}

// watchSchema returns ErrSchemaTooNew once the keyspace's version passes
// the one this release speaks, watching from revision rev on.
func (s *Server) watchSchema(ctx context.Context, rev int64) error {
	retry := backoff.Backoff{Min: s.opts.LeaseTTL / 4}
	for ctx.Err() == nil {
		for resp := range s.cli.Watch(ctx, s.keys.schema(), clientv3.WithRev(rev+1)) {
			if resp.Err() != nil {
				break // compacted: read it again below
			}
			for _, ev := range resp.Events {
				if err := s.schemaEvent(ev.Kv.Value, ev.Type == clientv3.EventTypeDelete); err != nil {
					return err
				}
				rev = ev.Kv.ModRevision
			}
		}
		if ctx.Err() != nil {
			break
		}
		v, r, err := s.readSchema(ctx)
		if err != nil {
			retry.Wait(ctx)
			continue
		}
		if err := s.schemaEvent([]byte(strconv.Itoa(v)), v == 0); err != nil {
			return err
		}
		rev = max(rev, r)
	}
	return ctx.Err()
}

func (s *Server) schemaEvent(value []byte, deleted bool) error {
	if deleted {
		return nil
	}
	v, err := s.parseSchema(value)
	if err != nil {
		return err
	}
	if err := s.checkSchema(v, version.Schema); errors.Is(err, ErrSchemaTooNew) {
		return err
	}
	return nil
}

// readSchema reads the keyspace's schema version (0 when absent) and the
// revision it read at.
func (s *Server) readSchema(ctx context.Context) (int, int64, error) {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.cli.Get(octx, s.keys.schema())
	if err != nil {
		return 0, 0, etcdErr(octx, "read the schema version", err)
	}
	if len(resp.Kvs) == 0 {
		return 0, resp.Header.Revision, nil
	}
	v, err := s.parseSchema(resp.Kvs[0].Value)
	return v, resp.Header.Revision, err
}

// migrateSchema, run by the janitor's leader el, migrates a keyspace one
// version behind target with steps, once every candidate speaks target.
// It reports whether the keyspace is at target.
func (s *Server) migrateSchema(ctx context.Context, el *concurrency.Election, target int, steps map[int]migration) (bool, error) {
	k := s.keys.schema()
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.cli.Txn(octx).Then(clientv3.OpGet(k), clientv3.OpGet(s.keys.election(), clientv3.WithPrefix())).Commit()
	if err != nil {
		return false, etcdErr(octx, "read the schema version", err)
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return false, fmt.Errorf("coordinator: %s is gone", k)
	}
	from, err := s.parseSchema(kvs[0].Value)
	if err != nil || from >= target {
		return err == nil, err
	}
	if err := s.checkSchema(from, target); err != nil {
		return false, err
	}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		var c candidate
		if json.Unmarshal(kv.Value, &c) != nil || c.Schema < target {
			s.log.Info("schema: not migrating while a coordinator speaks an older schema", "coordinator", string(kv.Value), "schema", from, "to", target)
			return false, nil
		}
	}
	step := steps[from]
	if step == nil {
		return false, fmt.Errorf("%w: no migration from schema %d", ErrSchemaTooOld, from)
	}
	rev := resp.Header.Revision
	cmps, ops, err := step(ctx, s, rev)
	if err != nil {
		return false, err
	}
	cmps = append(cmps,
		clientv3.Compare(clientv3.CreateRevision(el.Key()), "=", el.Rev()),
		clientv3.Compare(clientv3.Value(k), "=", strconv.Itoa(from)),
		clientv3.Compare(clientv3.ModRevision(s.keys.election()), "<", rev+1).WithPrefix(),
	)
	mresp, err := s.cli.Txn(octx).If(cmps...).Then(append(ops, clientv3.OpPut(k, strconv.Itoa(target)))...).Commit()
	if err != nil {
		return false, etcdErr(octx, "migrate the schema", err)
	}
	if !mresp.Succeeded {
		return false, fmt.Errorf("%w: migrating schema %d to %d", ErrMigrationFenced, from, target)
	}
	s.log.Info("schema: migrated the keyspace", "from", from, "to", target)
	return true, nil
}
