package coordinator

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// Limits on untrusted input.
const (
	MaxRequestIDBytes = 256
	MaxScopeBytes     = 256
	MaxReasonBytes    = 1024
	MaxNameBytes      = 128
)

// keys lays out the etcd keyspace under one prefix:
//
//	workers/<worker>            worker info, on the worker's lease
//	calls/<call>                call record, on a retention lease
//	index/<scope>/<request-key> call id, on a retention lease
//	running/<scope>/<request-key> the call as begun, while it runs: written
//	                            by Begin, deleted by the decision, so a
//	                            scope's running calls are one prefix read
//	sessions/<id>               an open session; sessions-closed/<id> once closed
//	owners/<worker>/<call>      "" while running; a stop order once settled
//	                            without the worker; gone when the handler returned
//	audit/<nanos>-<call>[-lost] audit record, on a retention lease
//	janitor/                    the janitor's election
//	task-runs/<worker>/<task>   a task's run until the task ends, for its
//	                            worker to start if no gateway did (tasks_runs.go)
//	abandoned/<begin id>        a Begin its caller gave up on, which may no
//	                            longer commit; on Begin's lease
//	progress/<worker>           the last progress of the worker's running
//	                            calls, as its last digest said; one Put per
//	                            heartbeat at most, on the worker's lease
//	                            (progress.go)
//	schema                      the keyspace's schema version (schema.go)
type keys struct{ prefix string }

func (k keys) workers() string                 { return k.prefix + "workers/" }
func (k keys) worker(name string) string       { return k.prefix + "workers/" + name }
func (k keys) call(id string) string           { return k.prefix + "calls/" + id }
func (k keys) owners() string                  { return k.prefix + "owners/" }
func (k keys) ownersOf(worker string) string   { return k.prefix + "owners/" + worker + "/" }
func (k keys) owner(worker, id string) string  { return k.ownersOf(worker) + id }
func (k keys) audits() string                  { return k.prefix + "audit/" }
func (k keys) election() string                { return k.prefix + "janitor/" }
func (k keys) abandoned(beginID string) string { return k.prefix + "abandoned/" + beginID }
func (k keys) schema() string                  { return k.prefix + "schema" }
func (k keys) progress() string                { return k.prefix + "progress/" }
func (k keys) progressOf(worker string) string { return k.prefix + "progress/" + worker }

func (k keys) index(key *pb.CallKey) string {
	return k.prefix + "index/" + key.GetScope() + "/" + requestKey(key.GetRequestId())
}

func (k keys) running(key *pb.CallKey) string {
	return k.runningIn(key.GetScope()) + requestKey(key.GetRequestId())
}

func (k keys) runningIn(scope string) string { return k.prefix + "running/" + scope + "/" }

// runningOf is the running-set key of a call record.
func (k keys) runningOf(rec *callRecord) string {
	return k.runningIn(rec.Scope) + requestKey(requestIDFromJSON(rec.RequestID))
}

// audit names an audit record so that keys sort by settle time.
func (k keys) audit(at time.Time, callID, suffix string) string {
	return fmt.Sprintf("%saudit/%020d-%s%s", k.prefix, at.UnixNano(), callID, suffix)
}

// auditFrom is the first audit key at or after t.
func (k keys) auditFrom(t time.Time) string {
	if t.IsZero() {
		return k.audits()
	}
	return fmt.Sprintf("%saudit/%020d", k.prefix, t.UnixNano())
}

// parseOwner splits an owners/<worker>/<call> key.
func (k keys) parseOwner(key string) (worker, callID string, ok bool) {
	rest, ok := strings.CutPrefix(key, k.owners())
	if !ok {
		return "", "", false
	}
	return strings.Cut(rest, "/")
}

// requestKey encodes a request id so that 1 and "1" never collide and any
// string is a safe key segment.
func requestKey(id *pb.RequestId) string {
	if t, ok := id.GetKind().(*pb.RequestId_Text); ok {
		return "s:" + base64.RawURLEncoding.EncodeToString([]byte(t.Text))
	}
	return "n:" + strconv.FormatInt(id.GetNumber(), 10)
}

func validateCallKey(key *pb.CallKey) error {
	if key == nil {
		return invalid("key is required")
	}
	if err := validateScope(key.GetScope()); err != nil {
		return err
	}
	return validateRequestID(key.GetRequestId())
}

// validateScope accepts 1..256 printable ASCII bytes other than '/'.
func validateScope(s string) error {
	if s == "" || len(s) > MaxScopeBytes {
		return invalid("scope must be 1 to %d bytes", MaxScopeBytes)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '/' {
			return invalid("scope has a character that is not allowed at byte %d", i)
		}
	}
	return nil
}

func validateRequestID(id *pb.RequestId) error {
	switch k := id.GetKind().(type) {
	case *pb.RequestId_Number:
		return nil
	case *pb.RequestId_Text:
		if len(k.Text) > MaxRequestIDBytes {
			return invalid("request id is %d bytes; the limit is %d", len(k.Text), MaxRequestIDBytes)
		}
		if !utf8.ValidString(k.Text) {
			return invalid("request id is not valid UTF-8")
		}
		return nil
	default:
		return invalid("request id must be an integer or a string")
	}
}

// validateName accepts worker names: 1..128 of [A-Za-z0-9._-].
func validateName(what, s string) error {
	if s == "" || len(s) > MaxNameBytes {
		return invalid("%s must be 1 to %d bytes", what, MaxNameBytes)
	}
	for _, r := range s {
		if !(r < 0x80 && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '.' || r == '_' || r == '-')) {
			return invalid("%s may contain only letters, digits, '.', '_' and '-'", what)
		}
	}
	return nil
}

// validateToolName accepts 1..128 bytes of printable UTF-8 without '/'.
func validateToolName(s string) error {
	if s == "" || len(s) > MaxNameBytes || !utf8.ValidString(s) {
		return invalid("tool name must be 1 to %d bytes of UTF-8", MaxNameBytes)
	}
	for _, r := range s {
		if unicode.IsControl(r) || unicode.IsSpace(r) || r == '/' {
			return invalid("tool name %q has a character that is not allowed", s)
		}
	}
	return nil
}

// SanitizeReason makes a free-text reason safe to log, store and show:
// invalid UTF-8 and control characters are dropped and the result is cut
// to at most 1 KiB on a character boundary.
func SanitizeReason(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) {
			continue
		}
		if b.Len()+utf8.RuneLen(r) > MaxReasonBytes {
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}

// validCallID says whether id is a call id: 32 hex digits.
func validCallID(id string) bool {
	_, err := hex.DecodeString(id)
	return len(id) == 32 && err == nil
}
