package gateway

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"time"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
	"github.com/mcpcancel/mcpcancel/internal/mcpspec"
)

// 2026-07-28 multi round-trip requests (MRTR). A server sends a
// 2026-07-28 client no requests: when a call's handler asks its client
// something, the gateway answers the call with resultType
// "input_required", the handler's requests as inputRequests (keyed by
// the handler's keys, see worker.WithInputKey), and a requestState. The
// client retries the call (a new id, any replica) with inputResponses and
// the state; the retry runs the handler again with every answer so far,
// and each request whose key has an answer returns it without asking, so
// the handler gets past it. The round's call ends CANCELLED by the tool
// once its input_required result is out. A handler that must not run
// again (a fronted server's tool) says its requests are parkable: the
// round's call is parked on its worker instead, and the retry resumes it
// there (park.go).
//
// requestState is sealed with AES-256-GCM under a key every replica
// shares (Options.StateKey): it holds the answers of earlier rounds, an
// expiry, and the worker and park id of a parked call; its additional
// data binds it to the principal and the request (tool and arguments). State that does not open under the
// principal and request of the retry, or that expired, is refused with
// -32602.

// mrtrMethods are the requests an input_required result may answer.
var mrtrMethods = []string{"tools/call", "prompts/get", "resources/read"}

// stateKeyBytes is the size of Options.StateKey (AES-256).
const stateKeyBytes = 32

// errState is the reason a requestState is refused.
var (
	errStateTampered = errors.New("requestState failed its integrity check: it was altered, or is not for this principal and request")
	errStateExpired  = errors.New("requestState expired; call the tool again without it")
)

// roundTrip is a 2026-07-28 call's part in a multi round-trip request.
type roundTrip struct {
	inputs  map[string][]byte // every answer so far, by key, for the worker
	pending []inputRequest    // requests of this round gathered so far
	// The call this one resumes, parked on worker pin (park.go); empty
	// for a first call, and for retries of native handlers.
	pin, resume string
}

type inputRequest struct {
	key      string
	method   string
	params   json.RawMessage
	seq      int64
	parkable bool // the handler waits for the answer (park.go)
}

type sealedState struct {
	Expires int64                      `json:"exp"` // Unix nanoseconds
	Answers map[string]json.RawMessage `json:"answers"`
	// The parked call the retry resumes: its worker and park id (park.go).
	Worker string `json:"worker,omitempty"`
	Park   string `json:"park,omitempty"`
}

// mrtrParams are the retry's fields of a 2026-07-28 tools/call.
type mrtrParams struct {
	InputResponses json.RawMessage `json:"inputResponses"`
	RequestState   *string         `json:"requestState"`
}

// openRound reads a 2026-07-28 call's inputResponses and requestState
// into the answers its handler gets.
func (c *call) openRound(params *inParams, p *routed) *jsonrpc.Error {
	if !c.rev2026 {
		return nil // 2025 clients answer requests; nothing answers for them
	}
	c.children.tool, c.children.args = p.method+" "+p.target, p.arguments
	if p.method != "tools/call" {
		// A retry's own fields are not part of the request it repeats.
		c.children.args = withoutRoundTrip(p.params)
	}
	m := mrtrParams{InputResponses: params.InputResponses}
	if len(params.RequestState) > 0 {
		json.Unmarshal(params.RequestState, &m.RequestState)
	}
	answers := map[string]json.RawMessage{}
	if m.RequestState != nil {
		prior, err := c.s.g.openState(*m.RequestState, c.s.principal, c.children.tool, c.children.args)
		if err != nil {
			return jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "Invalid params: %v", err)
		}
		answers = prior.Answers
		c.children.roundTrip.pin, c.children.roundTrip.resume = prior.Worker, prior.Park
	}
	if m.InputResponses != nil {
		var in map[string]json.RawMessage
		if json.Unmarshal(m.InputResponses, &in) != nil || in == nil {
			return jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "Invalid params: inputResponses must be an object")
		}
		for k, v := range in {
			if len(v) == 0 || v[0] != '{' {
				return jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "Invalid params: inputResponses[%q] must be a result object", k)
			}
			answers[k] = v
		}
	}
	if len(answers) > 0 {
		c.children.roundTrip.inputs = make(map[string][]byte, len(answers))
		for k, v := range answers {
			c.children.roundTrip.inputs[k] = v
		}
	}
	return nil
}

// parkForInput gathers a 2026-07-28 call's requests toward its client;
// after the last of a batch it answers the call input_required and ends
// the round's call.
func (c *call) parkForInput(wc pb.WorkerServiceClient, begun *pb.BeginResponse, r *pb.ClientRequest) {
	c.children.note(r.GetSeq(), r.GetMethod(), "")
	if !slices.Contains(mrtrMethods, c.method) {
		c.refuse(wc, begun.GetCallId(), r.GetSeq(), jsonrpc.CodeMethodNotFound, "a 2026-07-28 client can be asked for input only in tools/call, prompts/get and resources/read")
		return
	}
	if _, ok := mcpspec.Declared(c.children.caps, r.GetMethod(), r.GetParamsJson()); !ok {
		c.refuse(wc, begun.GetCallId(), r.GetSeq(), jsonrpc.CodeMethodNotFound, "the client did not declare the capability "+r.GetMethod()+" needs")
		return
	}
	c.children.roundTrip.pending = append(c.children.roundTrip.pending, inputRequest{key: r.GetKey(), method: r.GetMethod(), params: r.GetParamsJson(), seq: r.GetSeq(), parkable: r.GetParkable()})
	c.children.note(r.GetSeq(), r.GetMethod(), "input_required")
	if r.GetMore() {
		return
	}
	if c.parkable() {
		c.parkForRetry(wc, begun) // park.go
		return
	}
	reqs := c.inputRequests()
	answers := make(map[string]json.RawMessage, len(c.children.roundTrip.inputs))
	for k, v := range c.children.roundTrip.inputs {
		answers[k] = v
	}
	st := sealedState{Expires: time.Now().Add(c.s.g.opts.InputTimeout).UnixNano(), Answers: answers}
	c.answerInputRequired(reqs, st, "the tool needs its client's input (2026-07-28 input_required); the client retries the call with its answers")
}

// inputRequests are the round's requests, by key, as the client gets
// them.
func (c *call) inputRequests() map[string]any {
	reqs := map[string]any{}
	for _, in := range c.children.roundTrip.pending {
		reqs[in.key] = map[string]any{"method": in.method, "params": in.params}
	}
	return reqs
}

// answerInputRequired answers the call input_required with st sealed,
// and ends the round's call: cancelled by the tool, for reason.
func (c *call) answerInputRequired(reqs map[string]any, st sealedState, reason string) {
	state, err := c.s.g.sealState(st, c.s.principal, c.children.tool, c.children.args)
	if err != nil {
		c.s.g.log.Error("sealing requestState", "err", err)
		return
	}
	c.setOutcome("input_required")
	c.respond(jsonrpc.Response(c.id, map[string]any{"resultType": "input_required", "inputRequests": reqs, "requestState": state}))
	c.sendCancel(&cancelOrder{who: pb.Initiator_INITIATOR_TOOL, reason: reason})
}

// withoutRoundTrip drops a retry's inputResponses and requestState from a
// request's params, leaving what names the request (the prompt's name and
// arguments, the resource's URI), which its requestState is bound to.
func withoutRoundTrip(params json.RawMessage) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(params, &m) != nil || m == nil {
		return params
	}
	delete(m, "inputResponses")
	delete(m, "requestState")
	b, err := json.Marshal(m)
	if err != nil {
		return params
	}
	return b
}

// stateAAD binds a requestState to its principal and request.
func stateAAD(principal, tool string, args json.RawMessage) []byte {
	var v any
	canon := []byte("{}")
	if len(args) > 0 && json.Unmarshal(args, &v) == nil && v != nil {
		canon, _ = json.Marshal(v) // maps marshal with sorted keys
	}
	sum := sha256.Sum256(canon)
	return []byte("mcpcancel-mrtr-v1\x00" + principal + "\x00" + tool + "\x00" + hex.EncodeToString(sum[:]))
}

func (g *Gateway) stateAEAD() (cipher.AEAD, error) {
	block, err := aes.NewCipher(g.opts.StateKey)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// sealState seals st (the answers so far, the parked call if any), for
// the client to echo.
func (g *Gateway) sealState(st sealedState, principal, tool string, args json.RawMessage) (string, error) {
	aead, err := g.stateAEAD()
	if err != nil {
		return "", err
	}
	plain, err := json.Marshal(st)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, aead.NonceSize())
	rand.Read(nonce)
	sealed := aead.Seal(nonce, nonce, plain, stateAAD(principal, tool, args))
	return base64.RawURLEncoding.EncodeToString(sealed), nil
}

// openState opens a requestState the client echoed.
func (g *Gateway) openState(state, principal, tool string, args json.RawMessage) (*sealedState, error) {
	aead, err := g.stateAEAD()
	if err != nil {
		return nil, err
	}
	b, err := base64.RawURLEncoding.DecodeString(state)
	if err != nil || len(b) < aead.NonceSize() {
		return nil, errStateTampered
	}
	plain, err := aead.Open(nil, b[:aead.NonceSize()], b[aead.NonceSize():], stateAAD(principal, tool, args))
	if err != nil {
		return nil, errStateTampered
	}
	var st sealedState
	if json.Unmarshal(plain, &st) != nil {
		return nil, errStateTampered
	}
	if time.Now().UnixNano() > st.Expires {
		return nil, errStateExpired
	}
	if st.Answers == nil {
		st.Answers = map[string]json.RawMessage{}
	}
	return &st, nil
}
