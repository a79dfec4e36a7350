package worker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
)

// BindStrict is Bind that also refuses an argument v has no field for,
// as a schema with "additionalProperties": false does. No arguments at
// all decode as {}.
func (c *Call) BindStrict(v any) error {
	args := c.Arguments
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage(`{}`)
	}
	d := json.NewDecoder(bytes.NewReader(args))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return &ArgumentsError{Tool: c.Tool, Err: argsError(err)}
	}
	return nil
}

// ArgumentsError is arguments that do not decode into a tool's Go type
// (Bind, BindStrict). Err says what is wrong in the words of the tool's
// schema, e.g. "seconds: want a number, got a string".
type ArgumentsError struct {
	Tool string
	Err  error
}

func (e *ArgumentsError) Error() string {
	return "invalid arguments for " + e.Tool + ": " + e.Err.Error()
}

func (e *ArgumentsError) Unwrap() error { return e.Err }

// argsError says what is wrong with a tool's arguments in the words of
// its JSON Schema ("seconds: want a number, got a string"), not in
// encoding/json's, which name Go types and fields the caller never saw.
// Other errors pass unchanged.
func argsError(err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		where := te.Field
		if where == "" {
			where = "arguments"
		}
		return fmt.Errorf("%s: want %s, got %s", where, schemaType(te.Type), jsonValue(te.Value))
	case errors.As(err, &se):
		return fmt.Errorf("arguments are not valid JSON: %s", strings.TrimPrefix(se.Error(), "json: "))
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return fmt.Errorf("unknown argument %s", name)
	}
	return err
}

// schemaType names the JSON Schema type that decodes into t.
func schemaType(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "a value"
	}
	switch t.Kind() {
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a value of another type"
}

// jsonValue names what encoding/json found: "string", "number", "number
// 2.5", "bool", "array", "object".
func jsonValue(v string) string {
	kind, detail, _ := strings.Cut(v, " ")
	switch kind {
	case "number":
		if detail != "" {
			return "the number " + detail
		}
		return "a number"
	case "bool":
		return "a boolean"
	case "array", "object":
		return "an " + kind
	case "string", "null":
		return "a " + kind
	}
	return v
}
