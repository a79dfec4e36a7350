package coordinator

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/backoff"
)

// workerInfo is the value of workers/<worker>.
type workerInfo struct {
	Name     string     `json:"name"`
	Address  string     `json:"address"`
	Tools    []*toolDef `json:"tools"`
	Capacity int32      `json:"capacity,omitempty"`
	Draining bool       `json:"draining,omitempty"`
	// Resources, templates and prompts; what else the worker serves.
	Offers   []*offerDef  `json:"offers,omitempty"`
	Features *featuresDef `json:"features,omitempty"`
}

type toolDef struct {
	Name         string `json:"name"`
	Title        string `json:"title,omitempty"`
	Description  string `json:"description,omitempty"`
	InputSchema  []byte `json:"input_schema,omitempty"`
	OutputSchema []byte `json:"output_schema,omitempty"`
	Annotations  []byte `json:"annotations,omitempty"`
	Idempotent   bool   `json:"idempotent,omitempty"`
	TaskSupport  string `json:"task_support,omitempty"`
	DeferTask    bool   `json:"defer_task,omitempty"`
	Meta         []byte `json:"meta,omitempty"`
	DurableBegin bool   `json:"durable_begin,omitempty"`
}

func toolDefs(tools []*pb.Tool) []*toolDef {
	out := make([]*toolDef, 0, len(tools))
	for _, t := range tools {
		out = append(out, &toolDef{
			Name: t.GetName(), Title: t.GetTitle(), Description: t.GetDescription(),
			InputSchema: t.GetInputSchemaJson(), OutputSchema: t.GetOutputSchemaJson(),
			Annotations: t.GetAnnotationsJson(), Idempotent: t.GetIdempotent(), TaskSupport: t.GetTaskSupport(), DeferTask: t.GetDeferTask(),
			Meta: t.GetMetaJson(), DurableBegin: t.GetDurableBegin(),
		})
	}
	return out
}

func (t *toolDef) proto() *pb.Tool {
	return &pb.Tool{
		Name: t.Name, Title: t.Title, Description: t.Description,
		InputSchemaJson: t.InputSchema, OutputSchemaJson: t.OutputSchema, AnnotationsJson: t.Annotations,
		Idempotent: t.Idempotent, TaskSupport: t.TaskSupport, DeferTask: t.DeferTask, MetaJson: t.Meta,
		DurableBegin: t.DurableBegin,
	}
}

type workerEntry struct {
	name      string
	createRev int64
	modRev    int64
	info      *workerInfo
	tools     map[string]*toolDef
	routes    *routes
}

// view is this replica's picture of live workers and of the calls whose
// handlers have not returned (the owners/ keys), kept current by watches.
// It only steers choices: every decision is re-checked in a transaction.
type view struct {
	s *Server

	mu      sync.Mutex
	rev     int64 // revision the view was loaded at
	workers map[string]*workerEntry
	// owners holds the calls whose owner key exists (handler not yet
	// returned), and inflight counts them per worker. Removal, the one
	// rule: an entry leaves when the owners/ watch shows its key deleted
	// (or a reload after compaction no longer finds it).
	owners   map[string]string // call id -> worker
	inflight map[string]int    // worker -> running handlers
	changed  chan struct{}     // closed when workers change, then replaced
}

func newView(s *Server) *view {
	return &view{s: s, workers: map[string]*workerEntry{}, owners: map[string]string{}, inflight: map[string]int{}, changed: make(chan struct{})}
}

// load reads workers/ and owners/ at one revision.
func (v *view) load(ctx context.Context) error {
	ctx, cancel := v.s.opCtx(ctx)
	defer cancel()
	resp, err := v.s.cli.Txn(ctx).Then(
		clientv3.OpGet(v.s.keys.workers(), clientv3.WithPrefix()),
		clientv3.OpGet(v.s.keys.owners(), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		return etcdErr(ctx, "load view", err)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.rev = resp.Header.Revision
	clear(v.workers)
	clear(v.owners)
	clear(v.inflight)
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		v.putWorkerLocked(kv)
	}
	v.notifyLocked()
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		if w, id, ok := v.s.keys.parseOwner(string(kv.Key)); ok {
			v.addOwnerLocked(w, id)
		}
	}
	return nil
}

// changes returns a channel closed at the next change of workers.
func (v *view) changes() <-chan struct{} {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.changed
}

func (v *view) notifyLocked() {
	close(v.changed)
	v.changed = make(chan struct{})
}

func (v *view) putWorkerLocked(kv *mvccpb.KeyValue) {
	info, err := decode[workerInfo]("worker", kv.Value)
	if err != nil {
		v.s.log.Error("skipping worker", "key", string(kv.Key), "err", err)
		return
	}
	e := &workerEntry{name: info.Name, createRev: kv.CreateRevision, modRev: kv.ModRevision, info: info, tools: map[string]*toolDef{}}
	for _, t := range info.Tools {
		e.tools[t.Name] = t
	}
	e.routes = newRoutes(info)
	v.workers[info.Name] = e
}

func (v *view) addOwner(worker, id string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.addOwnerLocked(worker, id)
}

func (v *view) addOwnerLocked(worker, id string) {
	if _, ok := v.owners[id]; !ok {
		v.owners[id] = worker
		v.inflight[worker]++
	}
}

func (v *view) removeOwner(worker, id string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.owners[id]; ok {
		delete(v.owners, id)
		if v.inflight[worker]--; v.inflight[worker] <= 0 {
			delete(v.inflight, worker)
		}
	}
}

// refreshWorkers reads workers/ now and adds what the watch has not
// delivered yet. It never removes a worker: removals come by the watch.
func (v *view) refreshWorkers(ctx context.Context) error {
	ctx, cancel := v.s.opCtx(ctx)
	defer cancel()
	resp, err := v.s.cli.Get(ctx, v.s.keys.workers(), clientv3.WithPrefix())
	if err != nil {
		return etcdErr(ctx, "read workers", err)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, kv := range resp.Kvs {
		if e := v.workers[string(kv.Key[len(v.s.keys.workers()):])]; e == nil || e.modRev < kv.ModRevision {
			v.putWorkerLocked(kv)
		}
	}
	return nil
}

// forgetWorker drops a worker a transaction found gone, until the watch
// says otherwise.
func (v *view) forgetWorker(name string, createRev int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if e := v.workers[name]; e != nil && e.createRev == createRev {
		delete(v.workers, name)
		v.notifyLocked()
	}
}

// pick chooses the live, undrained worker serving method on target (a
// tool, resource, prompt or completion reference) with the fewest running
// handlers, breaking ties at random. Only the workers that serve the
// target best qualify: a resource's exact URI outranks a template. For a
// retry, lost is the worker the call was lost with: it is passed over,
// and only workers that vouch for the tool's idempotence qualify.
func (v *view) pick(method, target, lost string) (*workerEntry, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	var best []*workerEntry
	bestLoad, bestRank, offered := -1, rankNone+1, false
	for _, e := range v.workers {
		rank, idempotent := e.serves(method, target)
		if rank < bestRank || lost != "" && (e.name == lost || !idempotent) {
			continue
		}
		if rank > bestRank {
			best, bestLoad, bestRank, offered = nil, -1, rank, false
		}
		offered = true
		load := v.inflight[e.name]
		if e.info.Draining || (e.info.Capacity > 0 && load >= int(e.info.Capacity)) {
			continue
		}
		switch {
		case bestLoad < 0 || load < bestLoad:
			best, bestLoad = []*workerEntry{e}, load
		case load == bestLoad:
			best = append(best, e)
		}
	}
	switch {
	case len(best) > 0:
	case offered:
		return nil, fmt.Errorf("%w: %q", ErrNoCapacity, target)
	case lost != "":
		return nil, fmt.Errorf("%w: no worker other than %s vouches that %q is idempotent", ErrNotRetryable, lost, target)
	default:
		return nil, fmt.Errorf("%w: %q", ErrUnknownTool, target)
	}
	return best[rand.IntN(len(best))], nil
}

// watchWorkers follows workers/ from the loaded revision.
func (v *view) watchWorkers(ctx context.Context) error {
	return v.watch(ctx, v.s.keys.workers(), func(ev *clientv3.Event) {
		v.mu.Lock()
		defer v.mu.Unlock()
		name := strings.TrimPrefix(string(ev.Kv.Key), v.s.keys.workers())
		defer v.notifyLocked()
		if ev.Type == clientv3.EventTypeDelete {
			delete(v.workers, name)
			return
		}
		v.putWorkerLocked(ev.Kv)
	})
}

// watchOwners follows owners/: it counts running handlers and pushes stop
// orders to workers attached to this replica.
func (v *view) watchOwners(ctx context.Context) error {
	return v.watch(ctx, v.s.keys.owners(), func(ev *clientv3.Event) {
		w, id, ok := v.s.keys.parseOwner(string(ev.Kv.Key))
		if !ok {
			return
		}
		switch {
		case ev.Type == clientv3.EventTypeDelete:
			v.removeOwner(w, id)
			v.s.running.remove(id)
		case ev.IsCreate():
			v.addOwner(w, id)
		case len(ev.Kv.Value) > 0:
			v.s.running.remove(id) // settled
			v.s.pushStop(w, id, ev.Kv.Value)
		}
	})
}

// watch follows a prefix from the view's revision, reloading the view and
// starting again if etcd compacts past it.
func (v *view) watch(ctx context.Context, prefix string, apply func(*clientv3.Event)) error {
	v.mu.Lock()
	rev := v.rev
	v.mu.Unlock()
	retry := backoff.Backoff{Min: 50 * time.Millisecond}
	for {
		compacted := false
		wch := v.s.cli.Watch(clientv3.WithRequireLeader(ctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithCreatedNotify())
		for resp := range wch {
			if err := resp.Err(); err != nil {
				v.s.log.Warn("watch interrupted", "prefix", prefix, "err", err)
				compacted = resp.CompactRevision > 0
				break
			}
			if resp.Created {
				v.s.health.watch(prefix, true)
			}
			for _, ev := range resp.Events {
				apply(ev)
			}
			rev = max(rev, resp.Header.Revision)
		}
		v.s.health.watch(prefix, false)
		if err := retry.Wait(ctx); err != nil {
			return err
		}
		if compacted {
			if err := v.load(ctx); err != nil {
				v.s.log.Warn("reloading view", "err", err)
				continue
			}
			v.mu.Lock()
			rev = v.rev
			v.mu.Unlock()
		}
	}
}

// snapshot lists workers for ListWorkers, sorted by name.
func (v *view) snapshot() []*pb.WorkerInfo {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]*pb.WorkerInfo, 0, len(v.workers))
	for _, e := range v.workers {
		wi := &pb.WorkerInfo{
			Name: e.name, Address: e.info.Address, Capacity: e.info.Capacity,
			Draining: e.info.Draining, InFlight: int32(v.inflight[e.name]),
		}
		for _, t := range e.info.Tools {
			wi.Tools = append(wi.Tools, t.proto())
		}
		for _, o := range e.info.Offers {
			wi.Offers = append(wi.Offers, o.proto())
		}
		wi.Features = e.info.Features.proto()
		out = append(out, wi)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// tools is the union of tools offered by live, undrained workers; when two
// workers describe a tool differently, the first by worker name wins.
func (v *view) tools() []*pb.Tool {
	tools, _, _ := v.catalogue()
	return tools
}

// ListWorkers implements CoordinatorService.ListWorkers.
func (s *Server) ListWorkers(ctx context.Context, _ *pb.ListWorkersRequest) (*pb.ListWorkersResponse, error) {
	if err := s.waitReady(ctx); err != nil {
		return nil, toStatus(err)
	}
	return &pb.ListWorkersResponse{Workers: s.view.snapshot()}, nil
}

// ListTools implements CoordinatorService.ListTools.
func (s *Server) ListTools(ctx context.Context, _ *pb.ListToolsRequest) (*pb.ListToolsResponse, error) {
	if err := s.waitReady(ctx); err != nil {
		return nil, toStatus(err)
	}
	// Current as of now: a worker whose registration the watch has not
	// delivered yet is read from etcd (on failure, what the view has).
	s.view.refreshWorkers(ctx)
	tools, offers, features := s.view.catalogue()
	return &pb.ListToolsResponse{Tools: tools, Offers: offers, Features: features}, nil
}
