// Package jsonrpc decodes and encodes the JSON-RPC 2.0 messages MCP
// carries, strictly: a request id is an integer or a string of at most
// 256 bytes, and 1 and "1" are different ids.
package jsonrpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// JSON-RPC's error codes. Those MCP defines are in internal/mcpspec.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternalError  = -32603
)

// MaxIDBytes bounds a string request id.
const MaxIDBytes = 256

// ID is a request id: an integer or a string.
type ID struct {
	str   string
	num   int64
	isStr bool
}

// Int returns an integer id.
func Int(n int64) ID { return ID{num: n} }

// String returns a string id.
func String(s string) ID { return ID{str: s, isStr: true} }

// IsString reports whether the id is a string.
func (id ID) IsString() bool { return id.isStr }

// Num is an integer id's value.
func (id ID) Num() int64 { return id.num }

// Str is a string id's value.
func (id ID) Str() string { return id.str }

// Key is a map key that keeps 1 and "1" apart.
func (id ID) Key() string {
	if id.isStr {
		return "s" + id.str
	}
	return "n" + strconv.FormatInt(id.num, 10)
}

// MarshalJSON writes the id as it was received.
func (id ID) MarshalJSON() ([]byte, error) {
	if id.isStr {
		return json.Marshal(id.str)
	}
	return strconv.AppendInt(nil, id.num, 10), nil
}

// Errors from ParseID.
var (
	ErrIDType   = errors.New("jsonrpc: id must be an integer or a string")
	ErrIDLength = fmt.Errorf("jsonrpc: string id longer than %d bytes", MaxIDBytes)
)

// ParseID reads an id: an integer (in int64; 1.0 is accepted as 1, 1.5 is
// not) or a string of at most MaxIDBytes of valid UTF-8.
func ParseID(raw json.RawMessage) (ID, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ID{}, ErrIDType
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return ID{}, ErrIDType
		}
		if len(s) > MaxIDBytes {
			return ID{}, ErrIDLength
		}
		if !utf8.ValidString(s) {
			return ID{}, ErrIDType
		}
		return String(s), nil
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		if n, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
			return Int(n), nil
		}
		f, err := strconv.ParseFloat(string(raw), 64)
		if err != nil || f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
			return ID{}, ErrIDType
		}
		return Int(int64(f)), nil
	default:
		return ID{}, ErrIDType
	}
}

// Error is a JSON-RPC error object.
type Error struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("jsonrpc %d: %s", e.Code, e.Message) }

// Errorf returns an Error with a formatted message.
func Errorf(code int, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Kind tells what a message is.
type Kind int

// Message kinds.
const (
	KindRequest Kind = iota + 1
	KindNotification
	KindResponse
)

// Message is one decoded JSON-RPC message.
type Message struct {
	Kind   Kind
	ID     ID // requests and responses
	Method string
	Params json.RawMessage // requests and notifications; nil if absent
	Result json.RawMessage // responses
	Error  *Error          // error responses
	// Parsed is what the receiver decoded of Params, set once where the
	// message enters it, so that no layer below decodes them again.
	Parsed any
}

type wire struct {
	JSONRPC *string         `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  *string         `json:"method"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Error   *Error          `json:"error"`
}

// DecodeError is a message that cannot be processed. ID is set when the
// message had a usable id, so the error can be answered to it.
type DecodeError struct {
	*Error
	ID    ID
	HasID bool
}

// Decode reads one message. Batches are rejected: MCP since 2025-06-18
// sends one message at a time.
func Decode(b []byte) (*Message, *DecodeError) {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '[' {
		return nil, &DecodeError{Error: Errorf(CodeInvalidRequest, "batches are not supported")}
	}
	var w wire
	if err := json.Unmarshal(b, &w); err != nil || len(b) == 0 || b[0] != '{' {
		return nil, &DecodeError{Error: Errorf(CodeParseError, "parse error: not a JSON object")}
	}
	m := &Message{Params: w.Params, Result: w.Result, Error: w.Error}
	hasID := len(w.ID) > 0 && string(bytes.TrimSpace(w.ID)) != "null"
	if hasID {
		id, err := ParseID(w.ID)
		if err != nil {
			return nil, &DecodeError{Error: Errorf(CodeInvalidRequest, "invalid request: %v", err)}
		}
		m.ID = id
	}
	fail := func(msg string) (*Message, *DecodeError) {
		return nil, &DecodeError{Error: Errorf(CodeInvalidRequest, "invalid request: %s", msg), ID: m.ID, HasID: hasID}
	}
	if w.JSONRPC == nil || *w.JSONRPC != "2.0" {
		return fail(`"jsonrpc" must be "2.0"`)
	}
	switch {
	case w.Method != nil:
		if *w.Method == "" {
			return fail("empty method")
		}
		if p := bytes.TrimSpace(w.Params); len(p) > 0 && p[0] != '{' && p[0] != '[' {
			return fail("params must be an object or an array")
		}
		m.Method = *w.Method
		m.Kind = KindNotification
		if hasID {
			m.Kind = KindRequest
		}
	case hasID && (w.Result != nil) != (w.Error != nil):
		m.Kind = KindResponse
	default:
		return fail("neither a request, a notification nor a response")
	}
	return m, nil
}

// Response encodes a result response.
func Response(id ID, result any) []byte {
	return mustMarshal(struct {
		JSONRPC string `json:"jsonrpc"`
		ID      ID     `json:"id"`
		Result  any    `json:"result"`
	}{"2.0", id, result})
}

// ErrorResponse encodes an error response; hasID false writes id null.
func ErrorResponse(id ID, hasID bool, e *Error) []byte {
	var rawID any
	if hasID {
		rawID = id
	}
	return mustMarshal(struct {
		JSONRPC string `json:"jsonrpc"`
		ID      any    `json:"id"`
		Error   *Error `json:"error"`
	}{"2.0", rawID, e})
}

// Notification encodes a notification.
func Notification(method string, params any) []byte {
	return mustMarshal(struct {
		JSONRPC string `json:"jsonrpc"`
		Method  string `json:"method"`
		Params  any    `json:"params,omitempty"`
	}{"2.0", method, params})
}

// Request encodes a request.
func Request(id ID, method string, params any) []byte {
	return mustMarshal(struct {
		JSONRPC string `json:"jsonrpc"`
		ID      ID     `json:"id"`
		Method  string `json:"method"`
		Params  any    `json:"params,omitempty"`
	}{"2.0", id, method, params})
}

func mustMarshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only our own values are encoded here
	}
	return b
}
