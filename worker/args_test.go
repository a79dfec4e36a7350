package worker

import (
	"encoding/json"
	"errors"
	"testing"
)

// TestBindSaysWhatIsWrongInSchemaWords: a Go tool's typed arguments that
// do not decode are described as the schema would, never with Go's type
// and field names.
func TestBindSaysWhatIsWrongInSchemaWords(t *testing.T) {
	type args struct {
		Seconds float64           `json:"seconds"`
		Steps   *int              `json:"steps"`
		Text    string            `json:"text"`
		On      bool              `json:"on"`
		Tags    []string          `json:"tags"`
		Opts    struct{ N uint8 } `json:"opts"`
	}
	for _, tc := range []struct {
		args   string
		strict bool
		want   string
	}{
		{`{"seconds":"three"}`, false, "invalid arguments for t: seconds: want a number, got a string"},
		{`{"steps":2.5}`, false, "invalid arguments for t: steps: want an integer, got the number 2.5"},
		{`{"text":5}`, false, "invalid arguments for t: text: want a string, got a number"},
		{`{"on":"yes"}`, false, "invalid arguments for t: on: want a boolean, got a string"},
		{`{"tags":"a"}`, false, "invalid arguments for t: tags: want an array, got a string"},
		{`{"opts":{"N":-1}}`, false, "invalid arguments for t: opts.N: want an integer, got the number -1"},
		{`[1]`, false, "invalid arguments for t: arguments: want an object, got an array"},
		{`{"seconds":1,"nap":true}`, true, `invalid arguments for t: unknown argument "nap"`},
	} {
		t.Run(tc.args, func(t *testing.T) {
			c := &Call{Tool: "t", Arguments: json.RawMessage(tc.args)}
			bind := c.Bind
			if tc.strict {
				bind = c.BindStrict
			}
			var a args
			err := bind(&a)
			var ae *ArgumentsError
			if err == nil || err.Error() != tc.want || !errors.As(err, &ae) {
				t.Errorf("Bind(%s) = %v, want %q as an *ArgumentsError", tc.args, err, tc.want)
			}
		})
	}
}
