package upstream_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker/upstream"
)

// What a fronted server offers beyond the basics passes whole: the _meta
// of its tools, resources and prompts and of their results (MCP Apps'
// ui, a vendor's key), and a ui:// resource's MIME type. A 2025-11-25
// session's results carry nothing of 2026-07-28 (resultType, caching
// hints, serverInfo in _meta), though the adapter speaks 2026-07-28 with
// the server; a 2026-07-28 request's carry the gateway's.
func TestExtensionsPassWhole(t *testing.T) {
	for _, tr := range []struct {
		name string
		opts func(*testing.T) upstream.Options
	}{
		{"stdio", func(*testing.T) upstream.Options { return fixtureStdio() }},
		{"http", func(t *testing.T) upstream.Options { return fixtureHTTP(t, false) }},
	} {
		t.Run(tr.name, func(t *testing.T) {
			st := startStack(t, tr.opts(t), "app")
			for _, era := range []string{"2025-11-25", "2026-07-28"} {
				t.Run(era, func(t *testing.T) {
					checkExtensions(t, &rpcClient{url: st.url, era: era})
					checkIdentity(t, &rpcClient{url: st.url, era: era})
				})
			}
		})
	}
}

func checkExtensions(t *testing.T, c *rpcClient) {
	want := metaJSON(t)
	modern := c.era == "2026-07-28"
	var tools struct {
		Tools []struct {
			Name string          `json:"name"`
			Meta json.RawMessage `json:"_meta"`
		} `json:"tools"`
	}
	c.call(t, "tools/list", ``, &tools)
	for _, tool := range tools.Tools {
		if tool.Name == "app" && !sameJSON(tool.Meta, want) {
			t.Errorf("tools/list: app's _meta %s; want %s", tool.Meta, want)
		}
	}
	var resources struct {
		Resources []struct {
			URI      string          `json:"uri"`
			MIMEType string          `json:"mimeType"`
			Meta     json.RawMessage `json:"_meta"`
		} `json:"resources"`
	}
	c.call(t, "resources/list", ``, &resources)
	if len(resources.Resources) != 1 || resources.Resources[0].URI != fixtureAppURI || resources.Resources[0].MIMEType != fixtureAppMIME || !sameJSON(resources.Resources[0].Meta, want) {
		t.Errorf("resources/list: %+v; want %s, %s, _meta %s", resources.Resources, fixtureAppURI, fixtureAppMIME, want)
	}
	var prompts struct {
		Prompts []struct {
			Name string          `json:"name"`
			Meta json.RawMessage `json:"_meta"`
		} `json:"prompts"`
	}
	c.call(t, "prompts/list", ``, &prompts)
	if len(prompts.Prompts) != 1 || !sameJSON(prompts.Prompts[0].Meta, want) {
		t.Errorf("prompts/list: %+v; want greet with _meta %s", prompts.Prompts, want)
	}
	for _, r := range []struct{ method, params, name string }{
		{"resources/read", fmt.Sprintf(`"uri":%q`, fixtureAppURI), fixtureAppURI},
		{"prompts/get", `"name":"greet"`, "greet"},
		{"tools/call", `"name":"app","arguments":{}`, "app"},
	} {
		var res map[string]json.RawMessage
		c.call(t, r.method, r.params, &res)
		meta := res["_meta"]
		if r.method == "resources/read" {
			var contents []struct {
				MIMEType string          `json:"mimeType"`
				Text     string          `json:"text"`
				Meta     json.RawMessage `json:"_meta"`
			}
			json.Unmarshal(res["contents"], &contents)
			if len(contents) != 1 || contents[0].MIMEType != fixtureAppMIME || contents[0].Text != fixtureAppHTML {
				t.Errorf("resources/read contents %s; want the app's HTML as %s", res["contents"], fixtureAppMIME)
				continue
			}
			meta = contents[0].Meta
		}
		if !sameJSON(meta, want) {
			t.Errorf("%s: _meta %s; want %s", r.method, meta, want)
		}
		for _, key := range []string{"resultType", "ttlMs", "cacheScope"} {
			if _, ok := res[key]; ok != (modern && (key == "resultType" || r.method == "resources/read")) {
				b, _ := json.Marshal(res)
				t.Errorf("%s: %s %s", r.method, map[bool]string{true: "has", false: "lacks"}[ok], b)
			}
		}
	}
}

// checkIdentity: the fronted server's serverInfo and instructions reach
// the client, in initialize (2025-11-25) or server/discover (2026-07-28).
func checkIdentity(t *testing.T, c *rpcClient) {
	var res struct {
		ServerInfo   *struct{ Name, Title, Version string } `json:"serverInfo"`
		Instructions string                                 `json:"instructions"`
		Meta         struct {
			ServerInfo *struct{ Name, Title, Version string } `json:"io.modelcontextprotocol/serverInfo"`
		} `json:"_meta"`
	}
	if c.era == "2026-07-28" {
		c.call(t, "server/discover", ``, &res)
		res.ServerInfo = res.Meta.ServerInfo
	} else {
		_, b := testcluster.PostMCP(t, c.url, "", "", fmt.Sprintf(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":%q,"capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`, c.era))
		var resp struct{ Result json.RawMessage }
		if err := json.Unmarshal(b, &resp); err != nil || json.Unmarshal(resp.Result, &res) != nil {
			t.Fatalf("initialize: %s", b)
		}
	}
	if res.ServerInfo == nil || *res.ServerInfo != (struct{ Name, Title, Version string }{fixtureName, fixtureTitle, fixtureVersion}) || res.Instructions != fixtureInstructions {
		t.Errorf("serverInfo %+v, instructions %q; want the fixture's %s %q %s and %q", res.ServerInfo, res.Instructions, fixtureName, fixtureTitle, fixtureVersion, fixtureInstructions)
	}
}

// rpcClient sends raw JSON-RPC requests to the gateway in one revision.
type rpcClient struct {
	url, era string
	session  string
	id       int
}

// call sends method with params (the members of the params object) and
// decodes its result into out.
func (c *rpcClient) call(t *testing.T, method, params string, out any) {
	t.Helper()
	h := map[string]string{"Mcp-Protocol-Version": c.era}
	meta := ""
	if c.era == "2026-07-28" {
		h["Mcp-Method"] = method
		meta = fmt.Sprintf(`"_meta":{"io.modelcontextprotocol/protocolVersion":%q,"io.modelcontextprotocol/clientCapabilities":{}}`, c.era)
	} else {
		if c.session == "" {
			c.session = initSession(t, c.url, c.era)
		}
		h["Mcp-Session-Id"] = c.session
	}
	var name struct {
		Name string `json:"name"`
		URI  string `json:"uri"`
	}
	json.Unmarshal([]byte("{"+params+"}"), &name)
	if c.era == "2026-07-28" && name.Name+name.URI != "" {
		h["Mcp-Name"] = name.Name + name.URI
	}
	if params != "" && meta != "" {
		params += ","
	}
	c.id++
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":{%s%s}}`, c.id, method, params, meta)
	msgs := sseMessages(t, c.url, h, body)
	var resp struct {
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	if len(msgs) == 0 || json.Unmarshal(msgs[len(msgs)-1], &resp) != nil || resp.Result == nil {
		t.Fatalf("%s: %s", method, msgs)
	}
	if err := json.Unmarshal(resp.Result, out); err != nil {
		t.Fatalf("%s: %s: %v", method, resp.Result, err)
	}
}

func metaJSON(t *testing.T) json.RawMessage {
	b, err := json.Marshal(fixtureMeta())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}
