package upstream

import (
	"bufio"
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// What a stdio server writes is read as the SDK's own connection reads
// it: the same messages, the same refusals (keys aside: stdio.go).
func TestStdioDecodeMatchesTheSDK(t *testing.T) {
	for _, line := range []string{
		`{"jsonrpc":"2.0","id":1,"result":{"content":[]}}`,
		`{"jsonrpc":"2.0","id":"a","result":null}`,
		`{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"bad","data":{"x":1}}}`,
		`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":1}}`,
		`{"jsonrpc":"2.0","id":3,"method":"elicitation/create","params":{}}`,
		`{"jsonrpc":"2.0","id":3,"method":""}`,
	} {
		want, err := jsonrpc.DecodeMessage([]byte(line))
		if err != nil {
			t.Fatalf("the SDK refused %s: %v", line, err)
		}
		got, err := decodeMessage([]byte(line))
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		wantWire, _ := jsonrpc.EncodeMessage(want)
		gotWire, _ := jsonrpc.EncodeMessage(got)
		if string(gotWire) != string(wantWire) {
			t.Errorf("%s:\n got %s\nwant %s", line, gotWire, wantWire)
		}
	}
	for _, line := range []string{
		`{"jsonrpc":"1.0","id":1,"result":{}}`,
		`{"jsonrpc":"2.0","result":{}}`,
		`{"jsonrpc":"2.0","id":{},"result":{}}`,
		`{"jsonrpc":"2.0","id":1,"result":`,
		`not json`,
	} {
		if _, err := jsonrpc.DecodeMessage([]byte(line)); err == nil {
			t.Fatalf("the SDK took %s", line)
		}
		if m, err := decodeMessage([]byte(line)); err == nil {
			t.Errorf("%s: took %#v, want an error as the SDK's", line, m)
		}
	}
}

// Lines are read whole, however long, up to the bound; the last may lack
// its end; blank lines are skipped; batches are split.
func TestStdioReadsLines(t *testing.T) {
	long := `{"jsonrpc":"2.0","id":1,"result":{"text":"` + strings.Repeat("x", 200<<10) + `"}}`
	input := long + "\r\n\n" +
		`[{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","method":"b"}]` + "\n" +
		`{"jsonrpc":"2.0","method":"last"}`
	c := &stdioConn{lines: make(chan lineOrErr), closed: make(chan struct{})}
	go c.readLines(strings.NewReader(input)) // owned: ends at the input's end, read below
	var got []string
	for {
		m, err := c.Read(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch m := m.(type) {
		case *jsonrpc.Response:
			got = append(got, "response of "+strconv.Itoa(len(m.Result)))
		case *jsonrpc.Request:
			got = append(got, m.Method)
		}
	}
	want := "response of " + strconv.Itoa(len(long)-len(`{"jsonrpc":"2.0","id":1,"result":}`)) + ",a,b,last"
	if strings.Join(got, ",") != want {
		t.Fatalf("read %v, want %s", got, want)
	}

	over := bufio.NewReaderSize(strings.NewReader(strings.Repeat("x", maxLine+10)+"\n"), 64<<10)
	if _, err := readLine(over); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("a line past the bound: %v", err)
	}
}
