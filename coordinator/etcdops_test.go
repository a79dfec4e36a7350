package coordinator_test

import (
	"context"
	"sync/atomic"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcdOps counts what a coordinator asks of etcd through a client whose KV
// it wraps: reads (Gets and Txns that only read), commits (Txns that may
// write, won or not), and the keys that reads returned.
type etcdOps struct {
	reads, commits, doomed, keys atomic.Int64
}

type opCounts struct{ Reads, Commits, Doomed, Keys int64 }

func (o *etcdOps) snapshot() opCounts {
	return opCounts{o.reads.Load(), o.commits.Load(), o.doomed.Load(), o.keys.Load()}
}

func (o *etcdOps) reset() {
	o.reads.Store(0)
	o.commits.Store(0)
	o.doomed.Store(0)
	o.keys.Store(0)
}

// count wraps cli's KV; the coordinator's Gets and Txns go through it.
func (o *etcdOps) count(cli *clientv3.Client) {
	cli.KV = &countingKV{KV: cli.KV, ops: o}
}

type countingKV struct {
	clientv3.KV
	ops *etcdOps
}

func (k *countingKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	resp, err := k.KV.Get(ctx, key, opts...)
	k.ops.reads.Add(1)
	if err == nil {
		k.ops.keys.Add(int64(len(resp.Kvs)))
	}
	return resp, err
}

func (k *countingKV) Txn(ctx context.Context) clientv3.Txn {
	return &countingTxn{Txn: k.KV.Txn(ctx), ops: k.ops}
}

type countingTxn struct {
	clientv3.Txn
	ops    *etcdOps
	writes bool
	guard  bool
}

func (t *countingTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.guard = t.guard || len(cs) > 0
	t.Txn = t.Txn.If(cs...)
	return t
}

func (t *countingTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	for _, op := range ops {
		t.writes = t.writes || !op.IsGet()
	}
	t.Txn = t.Txn.Then(ops...)
	return t
}

func (t *countingTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.Txn = t.Txn.Else(ops...)
	return t
}

func (t *countingTxn) Commit() (*clientv3.TxnResponse, error) {
	resp, err := t.Txn.Commit()
	if t.writes {
		t.ops.commits.Add(1)
		if err == nil && !resp.Succeeded {
			t.ops.doomed.Add(1) // a write whose guard failed: wasted
		}
	} else {
		t.ops.reads.Add(1)
	}
	if err == nil {
		for _, r := range resp.Responses {
			t.ops.keys.Add(int64(len(r.GetResponseRange().GetKvs())))
		}
	}
	return resp, err
}
