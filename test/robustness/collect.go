package robustness

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
)

// collector watches every key under the prefix from the first revision
// and keeps every value a call record or audit record ever had.
type collector struct {
	mu    sync.Mutex
	calls map[string]*ServerCall
	rev   int64
}

type storedCall struct {
	CallID      string          `json:"call_id"`
	Scope       string          `json:"scope"`
	Principal   string          `json:"principal"`
	RequestID   json.RawMessage `json:"request_id"`
	Tool        string          `json:"tool"`
	Worker      string          `json:"worker"`
	Gateway     string          `json:"gateway"`
	State       string          `json:"state"`
	Initiator   string          `json:"initiator"`
	Reason      string          `json:"reason"`
	RequestedAt time.Time       `json:"requested_at"`
	Deadline    time.Time       `json:"deadline"`
	SettledAt   time.Time       `json:"settled_at"`
	RetryOf     string          `json:"retry_of"`
	Task        *struct {
		TTLMs int64 `json:"ttl_ms"`
	} `json:"task"`
}

// run watches until ctx ends; the etcd client resumes the watch on
// another member when one dies.
func (co *collector) run(ctx context.Context, cli *clientv3.Client) error {
	next := int64(1)
	for ctx.Err() == nil {
		wch := cli.Watch(clientv3.WithRequireLeader(ctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(next))
		for resp := range wch {
			if err := resp.Err(); err != nil {
				if resp.CompactRevision != 0 {
					return fmt.Errorf("watch compacted at %d: history lost", resp.CompactRevision)
				}
				break
			}
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypePut {
					co.put(string(ev.Kv.Key), ev.Kv.Value, ev.Kv.ModRevision, ev.Kv.Version == 1, time.Now())
				}
				next = ev.Kv.ModRevision + 1
			}
			co.mu.Lock()
			co.rev = max(co.rev, resp.Header.Revision)
			co.mu.Unlock()
		}
	}
	return nil
}

func (co *collector) put(key string, val []byte, rev int64, created bool, seen time.Time) {
	rest := strings.TrimPrefix(key, prefix)
	co.mu.Lock()
	defer co.mu.Unlock()
	switch {
	case strings.HasPrefix(rest, "calls/"):
		var r storedCall
		if json.Unmarshal(val, &r) != nil {
			return
		}
		s := co.callLocked(r.CallID)
		s.Scope, s.Principal, s.Gateway, s.RequestID, s.Tool, s.Worker = r.Scope, r.Principal, r.Gateway, r.RequestID, r.Tool, r.Worker
		s.Requested, s.Deadline, s.RetryOf = r.RequestedAt, r.Deadline, r.RetryOf
		if r.Task != nil {
			s.Task, s.TaskTTL = true, time.Duration(r.Task.TTLMs)*time.Millisecond
		}
		if created {
			s.Created++
		}
		if n := len(s.States); n == 0 || s.States[n-1].State != r.State {
			s.States = append(s.States, StateChange{State: r.State, Initiator: r.Initiator, Reason: r.Reason, Settled: r.SettledAt, Revision: rev, Seen: seen})
		}
	case strings.HasPrefix(rest, "task-results/"):
		co.callLocked(strings.TrimPrefix(rest, "task-results/")).ResultStored = true
	case strings.HasPrefix(rest, "audit/"):
		var a coordinator.AuditRecord
		if json.Unmarshal(val, &a) != nil {
			return
		}
		s := co.callLocked(a.CallID)
		for _, old := range s.Audits {
			if old.Key == key {
				return // a rewrite (stopped_at filled in), not a new record
			}
		}
		s.Audits = append(s.Audits, Audit{Outcome: a.Outcome, Initiator: a.Initiator, Settled: a.SettledAt, Key: key, TaskID: a.TaskID})
	}
}

func (co *collector) callLocked(id string) *ServerCall {
	if co.calls == nil {
		co.calls = map[string]*ServerCall{}
	}
	s := co.calls[id]
	if s == nil {
		s = &ServerCall{CallID: id}
		co.calls[id] = s
	}
	return s
}

// caughtUp says whether the watch has seen revision rev.
func (co *collector) caughtUp(rev int64) bool {
	co.mu.Lock()
	defer co.mu.Unlock()
	return co.rev >= rev
}

// running counts calls whose last state is running.
func (co *collector) running() int {
	co.mu.Lock()
	defer co.mu.Unlock()
	n := 0
	for _, s := range co.calls {
		if s.Final().State == stRunning || len(s.States) == 0 {
			n++
		}
	}
	return n
}

// snapshot returns a deep-enough copy for the checker.
func (co *collector) snapshot() map[string]*ServerCall {
	co.mu.Lock()
	defer co.mu.Unlock()
	out := make(map[string]*ServerCall, len(co.calls))
	for id, s := range co.calls {
		cp := *s
		cp.States = append([]StateChange(nil), s.States...)
		cp.Audits = append([]Audit(nil), s.Audits...)
		out[id] = &cp
	}
	return out
}

// listAudit pages through a coordinator's ListAudit.
func listAudit(ctx context.Context, cl pb.CoordinatorServiceClient) (map[string][]string, error) {
	out := map[string][]string{}
	token := ""
	for {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := cl.ListAudit(ctx, &pb.ListAuditRequest{PageSize: 500, PageToken: token})
		cancel()
		if err != nil {
			return nil, err
		}
		for _, a := range resp.GetRecords() {
			out[a.GetCallId()] = append(out[a.GetCallId()], a.GetOutcome())
		}
		if token = resp.GetNextPageToken(); token == "" {
			return out, nil
		}
	}
}

// leakedKeys lists the per-call keys still under the prefix.
func leakedKeys(ctx context.Context, cli *clientv3.Client) ([]string, error) {
	var out []string
	for _, p := range []string{"calls/", "index/", "owners/", "audit/", "tasks/", "task-results/"} {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := cli.Get(ctx, prefix+p, clientv3.WithPrefix())
		cancel()
		if err != nil {
			return nil, err
		}
		for _, kv := range resp.Kvs {
			v := string(kv.Value)
			if len(v) > 300 {
				v = v[:300] + "..."
			}
			out = append(out, fmt.Sprintf("%s = %q (lease %x)", kv.Key, v, kv.Lease))
		}
	}
	sort.Strings(out)
	return out, nil
}

// workerInFlight reads mcpcancel_worker_calls_in_flight from a worker's
// /metrics.
func workerInFlight(ctx context.Context, admin string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "mcpcancel_worker_calls_in_flight "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int(f), err
		}
	}
	return 0, fmt.Errorf("no mcpcancel_worker_calls_in_flight in %s/metrics", admin)
}

// dumpGoroutines saves the goroutines of the process whose admin port is
// admin to file, so that a handler that never returned can be explained
// after the run; a dump that fails is only noted in the file.
func dumpGoroutines(ctx context.Context, admin, file string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/debug/pprof/goroutine?debug=2", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		_ = os.WriteFile(file, []byte(err.Error()+"\n"), 0o644)
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		b = append(b, "\n"+err.Error()+"\n"...)
	}
	_ = os.WriteFile(file, b, 0o644)
}
