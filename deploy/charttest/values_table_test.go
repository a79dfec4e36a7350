package charttest

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	yaml "go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite the values table in helm/mcpcancel/README.md")

const (
	tableBegin = "<!-- values table: generated from values.yaml by deploy/charttest (go test -run TestValuesTable -update) -->"
	tableEnd   = "<!-- end of values table -->"
)

// row is one documented value.
type row struct{ key, typ, def, doc string }

// valuesRows walks values.yaml: a key with a "# -- " comment is one row
// (its whole value the default); a key without one must be a map whose
// keys are all documented.
func valuesRows(t *testing.T) []row {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(readFile(t, chartDir+"/values.yaml")), &doc); err != nil {
		t.Fatal(err)
	}
	var rows []row
	var walk func(prefix string, m *yaml.Node)
	walk = func(prefix string, m *yaml.Node) {
		for i := 0; i+1 < len(m.Content); i += 2 {
			k, v := m.Content[i], m.Content[i+1]
			key := prefix + k.Value
			if text, ok := docComment(k.HeadComment); ok {
				rows = append(rows, row{key, typeOf(v), defaultOf(t, v), text})
				continue
			}
			if v.Kind != yaml.MappingNode || len(v.Content) == 0 {
				t.Errorf("values.yaml: %s is not documented (a \"# -- \" comment above it)", key)
				continue
			}
			walk(key+".", v)
		}
	}
	walk("", doc.Content[0])
	return rows
}

// docComment is the text of the "# -- " comment block ending a head comment.
func docComment(head string) (string, bool) {
	lines := strings.Split(head, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if text, ok := strings.CutPrefix(lines[i], "# -- "); ok {
			for _, l := range lines[i+1:] {
				text += " " + strings.TrimSpace(strings.TrimPrefix(l, "#"))
			}
			return text, true
		}
	}
	return "", false
}

func typeOf(v *yaml.Node) string {
	switch {
	case v.Kind == yaml.MappingNode:
		return "object"
	case v.Kind == yaml.SequenceNode:
		return "list"
	case v.Tag == "!!int":
		return "int"
	case v.Tag == "!!bool":
		return "bool"
	}
	return "string"
}

func defaultOf(t *testing.T, v *yaml.Node) string {
	t.Helper()
	var x any
	if err := v.Decode(&x); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(x)
	if err != nil {
		t.Fatal(err)
	}
	return "`" + string(b) + "`"
}

func valuesTable(rows []row) string {
	var b strings.Builder
	b.WriteString(tableBegin + "\n\n| Key | Type | Default | Description |\n|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", r.key, r.typ, strings.ReplaceAll(r.def, "|", `\|`), strings.ReplaceAll(r.doc, "|", `\|`))
	}
	b.WriteString("\n" + tableEnd)
	return b.String()
}

// TestValuesTable: every value in values.yaml is documented, and the
// chart README's table is the one generated from those comments.
func TestValuesTable(t *testing.T) {
	rows := valuesRows(t)
	if len(rows) < 40 {
		t.Fatalf("only %d documented values", len(rows))
	}
	readmePath := chartDir + "/README.md"
	readme := readFile(t, readmePath)
	before, rest, ok1 := strings.Cut(readme, tableBegin)
	_, after, ok2 := strings.Cut(rest, tableEnd)
	if !ok1 || !ok2 {
		t.Fatalf("%s has no values table markers", readmePath)
	}
	want := before + valuesTable(rows) + after
	if want == readme {
		return
	}
	if *update {
		if err := os.WriteFile(readmePath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s's values table is stale: go test -run TestValuesTable -update", readmePath)
}

// TestSchemaCoversValues: every documented value is one the schema knows,
// so a typo in values.yaml cannot slip past it.
func TestSchemaCoversValues(t *testing.T) {
	var schema map[string]any
	if err := json.Unmarshal([]byte(readFile(t, chartDir+"/values.schema.json")), &schema); err != nil {
		t.Fatal(err)
	}
	for _, r := range valuesRows(t) {
		s := schema
		for _, part := range strings.Split(r.key, ".") {
			props, _ := s["properties"].(map[string]any)
			next, ok := props[part].(map[string]any)
			if !ok {
				t.Errorf("values.schema.json does not describe %s", r.key)
				break
			}
			s = next
		}
	}
}
