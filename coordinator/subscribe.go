package coordinator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/mcpcancel/mcpcancel/api/client"
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// Session notifications. A worker's server sends some notifications
// outside any call: log messages for one client session, and resource
// updates for the sessions subscribed to a resource. The worker hands them
// to the replica it is attached to; the client's session may be held by
// any gateway, attached to any replica. etcd is the bus: the replica
// writes the notification, resolved to the sessions it is for, to its own
// key notes/<replica>, overwriting the last (one write a notification, no
// garbage: a watch sees every revision), and every replica watches notes/
// and streams each to its gateways, which deliver to the sessions they
// hold. A session's end travels the same way, to every replica's workers.
//
// Subscriptions live in etcd, on the retention lease, under two keys, so
// both "is this session subscribed" and "who is subscribed to this URI"
// are one read:
//
//	subs/<scope>/<uri-hash>      the URI
//	subs-uri/<uri-hash>/<scope>  ""
//
// and are deleted when the session ends. A 2026-07-28 subscriptions/listen
// subscribes the same way, under its own scope (stream:…) on HTTP or its
// connection's on stdio, and removes what it subscribed when it ends.

// Limits on session notifications.
const (
	MaxURIBytes          = 4096
	maxNotificationBytes = 64 << 10
	noteWatcherBuffer    = 256
)

func (k keys) notes() string                    { return k.prefix + "notes/" }
func (k keys) note(replica string) string       { return k.prefix + "notes/" + replica }
func (k keys) subsOf(scope string) string       { return k.prefix + "subs/" + scope + "/" }
func (k keys) subsTo(uriHash string) string     { return k.prefix + "subs-uri/" + uriHash + "/" }
func (k keys) sub(scope, uriHash string) string { return k.subsOf(scope) + uriHash }

func uriHash(uri string) string {
	h := sha256.Sum256([]byte(uri))
	return hex.EncodeToString(h[:16])
}

// note is the value of notes/<replica>: a notification for sessions, or
// the end of one session.
type note struct {
	Sessions []string        `json:"sessions,omitempty"`
	Method   string          `json:"method,omitempty"`
	Params   json.RawMessage `json:"params,omitempty"`
	Ended    string          `json:"ended,omitempty"`
	// RequestID makes it a request toward the session (Worker.AskSession).
	RequestID string `json:"request_id,omitempty"`
}

// noteWatchers are the gateways' WatchSessionNotifications streams on this
// replica.
type noteWatchers struct {
	mu sync.Mutex
	m  map[chan *pb.WatchSessionNotificationsResponse]struct{}
}

func (w *noteWatchers) add() chan *pb.WatchSessionNotificationsResponse {
	ch := make(chan *pb.WatchSessionNotificationsResponse, noteWatcherBuffer)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[chan *pb.WatchSessionNotificationsResponse]struct{}{}
	}
	w.m[ch] = struct{}{}
	return ch
}

func (w *noteWatchers) remove(ch chan *pb.WatchSessionNotificationsResponse) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m, ch)
}

// send offers m to every watcher; a watcher that does not keep up misses
// it (logs and updates are lossy; a slow gateway must not stall the bus).
func (w *noteWatchers) send(m *pb.WatchSessionNotificationsResponse) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.m {
		select {
		case ch <- m:
		default:
		}
	}
}

// WatchSessionNotifications implements
// CoordinatorService.WatchSessionNotifications.
func (s *Server) WatchSessionNotifications(_ *pb.WatchSessionNotificationsRequest, stream pb.CoordinatorService_WatchSessionNotificationsServer) error {
	ctx := stream.Context()
	if err := s.waitReady(ctx); err != nil {
		return toStatus(err)
	}
	ch := s.notes.add()
	defer s.notes.remove(ch)
	for {
		select {
		case m := <-ch:
			if err := stream.Send(m); err != nil {
				return err
			}
		case <-ctx.Done():
			return nil
		}
	}
}

// watchNotes follows notes/: notifications go to this replica's gateways,
// session ends to its workers.
func (s *Server) watchNotes(ctx context.Context) error {
	return s.view.watch(ctx, s.keys.notes(), func(ev *clientv3.Event) {
		if ev.Type != clientv3.EventTypePut {
			return
		}
		n, err := decode[note]("note", ev.Kv.Value)
		if err != nil {
			s.log.Warn("skipping a bad session note", "err", err)
			return
		}
		if n.Ended != "" {
			s.attached.each(func(a *attachment) {
				a.send(&pb.AttachResponse{Msg: &pb.AttachResponse_SessionEnded{SessionEnded: &pb.SessionEnded{Session: n.Ended}}})
			})
			return
		}
		if len(n.Sessions) > 0 {
			s.notes.send(&pb.WatchSessionNotificationsResponse{Sessions: n.Sessions, Method: n.Method, ParamsJson: n.Params, RequestId: n.RequestID})
		}
	})
}

func (as *attachments) each(f func(*attachment)) {
	as.mu.Lock()
	defer as.mu.Unlock()
	for _, a := range as.byWorker {
		f(a)
	}
}

func (s *Server) publish(ctx context.Context, n *note) error {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	if _, err := s.cli.Put(octx, s.keys.note(s.opts.Name), encode(n)); err != nil {
		return etcdErr(octx, "publish session note", err)
	}
	return nil
}

// workerNotification resolves a worker's session notification to the
// sessions it is for and publishes it. A bad one is dropped, not an error:
// a worker's upstream server must not cost it its control stream.
func (s *Server) workerNotification(ctx context.Context, a *attachment, n *pb.SessionNotification) {
	if len(n.GetParamsJson()) > maxNotificationBytes || !json.Valid(n.GetParamsJson()) {
		return
	}
	var sessions []string
	var err error
	reqID := n.GetRequestId()
	switch n.GetMethod() {
	case "notifications/message", "notifications/elicitation/complete": // for the session named alone
		if validateSessionScope(n.GetSession()) == nil && reqID == "" {
			sessions = []string{n.GetSession()}
		}
	case "roots/list", "sampling/createMessage", "elicitation/create":
		// A request toward the session, under an id naming this worker:
		// the answer goes to it, and no worker can pose as another.
		if validateSessionScope(n.GetSession()) == nil && ownSessionRequest(reqID, a.worker) {
			sessions = []string{n.GetSession()}
		}
	case "notifications/cancelled":
		// The worker gave up a request it sent the session.
		var p struct {
			RequestID string `json:"requestId"`
		}
		json.Unmarshal(n.GetParamsJson(), &p)
		if validateSessionScope(n.GetSession()) == nil && reqID == "" && ownSessionRequest(p.RequestID, a.worker) {
			sessions = []string{n.GetSession()}
		}
	case "notifications/resources/updated":
		if reqID == "" {
			sessions, err = s.updatedSessions(ctx, n)
		}
	}
	if err == nil && len(sessions) > 0 {
		err = s.publish(ctx, &note{Sessions: sessions, Method: n.GetMethod(), Params: n.GetParamsJson(), RequestID: reqID})
	}
	if err != nil {
		s.log.Warn("dropping a session notification", "worker", a.worker, "method", n.GetMethod(), "err", err)
	}
}

// ownSessionRequest says whether id is a session request id of worker's.
func ownSessionRequest(id, worker string) bool {
	w, _, ok := client.ParseSessionRequestID(id)
	return ok && w == worker && len(id) <= MaxRequestIDBytes
}

// updatedSessions are the sessions a resource update is for: the one it
// came for if it is still subscribed (its own upstream session said so),
// or every session subscribed to the URI.
func (s *Server) updatedSessions(ctx context.Context, n *pb.SessionNotification) ([]string, error) {
	var p struct {
		URI string `json:"uri"`
	}
	if json.Unmarshal(n.GetParamsJson(), &p) != nil || p.URI == "" || len(p.URI) > MaxURIBytes {
		return nil, nil
	}
	h := uriHash(p.URI)
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	if sess := n.GetSession(); sess != "" {
		if validateSubscriberScope(sess) != nil {
			return nil, nil
		}
		resp, err := s.cli.Get(octx, s.keys.sub(sess, h), clientv3.WithCountOnly())
		if err != nil || resp.Count == 0 {
			return nil, err
		}
		return []string{sess}, nil
	}
	prefix := s.keys.subsTo(h)
	resp, err := s.cli.Get(octx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, etcdErr(octx, "read subscribers", err)
	}
	out := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out = append(out, strings.TrimPrefix(string(kv.Key), prefix))
	}
	return out, nil
}

// validateSessionScope accepts the scopes that are client sessions: a
// 2025-era HTTP session or a stdio connection.
func validateSessionScope(scope string) error {
	if err := validateScope(scope); err != nil {
		return err
	}
	if !client.IsSessionScope(scope) {
		return invalid("only a session or a stdio connection has notifications")
	}
	return nil
}

// validateSubscriberScope accepts the scopes that may subscribe to
// resources: client sessions, and 2026-07-28 listens (stream:…).
func validateSubscriberScope(scope string) error {
	if strings.HasPrefix(scope, client.StreamScope) {
		return validateScope(scope)
	}
	return validateSessionScope(scope)
}

// SubscribeResource implements CoordinatorService.SubscribeResource.
func (s *Server) SubscribeResource(ctx context.Context, req *pb.SubscribeResourceRequest) (*pb.SubscribeResourceResponse, error) {
	scope, uri := req.GetSession(), req.GetUri()
	if err := validateSubscriberScope(scope); err != nil {
		return nil, toStatus(err)
	}
	if uri == "" || len(uri) > MaxURIBytes {
		return nil, toStatus(invalid("uri must be 1 to %d bytes", MaxURIBytes))
	}
	h := uriHash(uri)
	var ops []clientv3.Op
	var cmps []clientv3.Cmp
	if req.GetUnsubscribe() {
		ops = []clientv3.Op{clientv3.OpDelete(s.keys.sub(scope, h)), clientv3.OpDelete(s.keys.subsTo(h) + scope)}
	} else {
		lease, err := s.retention.lease(ctx)
		if err != nil {
			return nil, toStatus(err)
		}
		// A closed session subscribes to nothing.
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(s.keys.sessionClosed(scope)), "=", 0))
		ops = []clientv3.Op{
			clientv3.OpPut(s.keys.sub(scope, h), uri, clientv3.WithLease(lease)),
			clientv3.OpPut(s.keys.subsTo(h)+scope, "", clientv3.WithLease(lease)),
		}
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.cli.Txn(octx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return nil, toStatus(etcdErr(octx, "subscribe", err))
	}
	if !resp.Succeeded {
		return nil, toStatus(ErrSessionClosed)
	}
	return &pb.SubscribeResourceResponse{}, nil
}

// sessionEnded forgets a client session's subscriptions and tells every
// replica's workers that it ended. Best effort: subscriptions left behind
// expire with the retention lease.
func (s *Server) sessionEnded(ctx context.Context, scope string) {
	if validateSessionScope(scope) != nil {
		return // a 2026-07-28 request: a listen removes its own subscriptions
	}
	octx, cancel := s.opCtx(ctx)
	resp, err := s.cli.Get(octx, s.keys.subsOf(scope), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	cancel()
	if err == nil && len(resp.Kvs) > 0 {
		ops := []clientv3.Op{clientv3.OpDelete(s.keys.subsOf(scope), clientv3.WithPrefix())}
		for _, kv := range resp.Kvs {
			h := strings.TrimPrefix(string(kv.Key), s.keys.subsOf(scope))
			ops = append(ops, clientv3.OpDelete(s.keys.subsTo(h)+scope))
		}
		for chunk := range slices.Chunk(ops, 128) {
			octx, cancel := s.opCtx(ctx)
			_, err = s.cli.Txn(octx).Then(chunk...).Commit()
			cancel()
		}
	}
	if err != nil {
		s.log.Warn("forgetting an ended session's subscriptions", "scope", scope, "err", err)
	}
	if err := s.publish(ctx, &note{Ended: scope}); err != nil {
		s.log.Warn("announcing a session's end", "scope", scope, "err", err)
	}
}
