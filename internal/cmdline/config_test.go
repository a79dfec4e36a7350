package cmdline

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testFlags is a command with a few flags of each kind and --config with
// the extra key "servers".
type testFlags struct {
	f      *Flags
	listen string
	drain  time.Duration
	demo   bool
	cap    int
	etcd   string
	file   *ConfigFile
}

func newTestFlags() *testFlags {
	o := &testFlags{}
	o.f = NewFlags(Streams{Stdout: new(bytes.Buffer), Stderr: new(bytes.Buffer)}, "worker", "test")
	o.f.StringVar(&o.listen, "listen", "127.0.0.1:7801", "")
	o.f.DurationVar(&o.drain, "drain-timeout", 30*time.Second, "")
	o.f.BoolVar(&o.demo, "demo", false, "")
	o.f.IntVar(&o.cap, "capacity", 0, "")
	o.f.StringVar(&o.etcd, "etcd", "", "")
	o.file = o.f.Config("servers")
	return o
}

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConfigPrecedence checks flags > environment > file > default, for
// each way of naming the file (flag or environment), in JSON and YAML.
func TestConfigPrecedence(t *testing.T) {
	jsonFile := writeFile(t, "worker.json", `{
		"listen": "file:1", "drain-timeout": "5s", "demo": true, "capacity": 7,
		"etcd": ["http://a:2379", "http://b:2379"], "servers": {"x": {"stdio": "srv"}}
	}`)
	yamlFile := writeFile(t, "worker.yaml", `
listen: file:1
drain-timeout: 5s
demo: true
capacity: 7
etcd: [http://a:2379, http://b:2379]
servers:
  x: {stdio: srv}
`)
	for _, file := range []string{jsonFile, yamlFile} {
		for _, tc := range []struct {
			name string
			env  map[string]string
			args []string
			want testFlags
		}{
			{"file over defaults", nil, []string{"--config", file},
				testFlags{listen: "file:1", drain: 5 * time.Second, demo: true, cap: 7, etcd: "http://a:2379,http://b:2379"}},
			{"environment over file", map[string]string{"MCPCANCEL_LISTEN": "env:2", "MCPCANCEL_CAPACITY": "9"}, []string{"--config", file},
				testFlags{listen: "env:2", drain: 5 * time.Second, demo: true, cap: 9, etcd: "http://a:2379,http://b:2379"}},
			{"flags over environment and file", map[string]string{"MCPCANCEL_LISTEN": "env:2"}, []string{"--config", file, "--listen", "flag:3", "--demo=false"},
				testFlags{listen: "flag:3", drain: 5 * time.Second, demo: false, cap: 7, etcd: "http://a:2379,http://b:2379"}},
			{"file named in the environment", map[string]string{"MCPCANCEL_CONFIG": file}, []string{"--capacity", "1"},
				testFlags{listen: "file:1", drain: 5 * time.Second, demo: true, cap: 1, etcd: "http://a:2379,http://b:2379"}},
		} {
			t.Run(filepath.Ext(file)+"/"+tc.name, func(t *testing.T) {
				for k, v := range tc.env {
					t.Setenv(k, v)
				}
				o := newTestFlags()
				if err := o.f.Parse(tc.args); err != nil {
					t.Fatal(err)
				}
				got := testFlags{listen: o.listen, drain: o.drain, demo: o.demo, cap: o.cap, etcd: o.etcd}
				if got != tc.want {
					t.Errorf("got %+v, want %+v", got, tc.want)
				}
				if s := strings.Join(strings.Fields(string(o.file.Extra["servers"])), ""); s != `{"x":{"stdio":"srv"}}` {
					t.Errorf("servers = %s, want the file's object", s)
				}
			})
		}
	}
}

// TestConfigWithoutFile leaves the flags at their defaults and Extra nil.
func TestConfigWithoutFile(t *testing.T) {
	o := newTestFlags()
	if err := o.f.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if o.listen != "127.0.0.1:7801" || o.file.Path != "" || o.file.Extra != nil {
		t.Errorf("listen %q, file %q, extra %v; want the defaults", o.listen, o.file.Path, o.file.Extra)
	}
}

// TestConfigRefusesBadFiles checks that every bad file is a usage error
// that names the file and what is wrong.
func TestConfigRefusesBadFiles(t *testing.T) {
	for _, tc := range []struct {
		name, file, text string
		want             []string
	}{
		{"unknown key", "w.json", `{"listen": "x:1", "lisen": "y:2", "demo": true}`,
			[]string{`w.json: unknown key "lisen" (did you mean "listen"?) for mcpcancel worker`, "the keys are the long flag names: capacity, demo, drain-timeout, etcd, listen, servers"}},
		{"two unknown keys", "w.yaml", "htp: x\nadmin-port: y\n", []string{`unknown keys "admin-port", "htp" for`}},
		{"a near key", "w.yaml", "server: {}\n", []string{`unknown key "server" (did you mean "servers"?)`}},
		{"config names a config", "w.json", `{"config": "other.json"}`, []string{`unknown key "config"`}},
		{"bad value", "w.json", `{"drain-timeout": "soon"}`, []string{`w.json: drain-timeout: invalid value "soon" for --drain-timeout`}},
		{"number for a duration", "w.json", `{"drain-timeout": 30}`, []string{`invalid value "30" for --drain-timeout`}},
		{"object for a flag", "w.json", `{"listen": {"host": "x"}}`, []string{"w.json: listen: an object where the flag takes a value"}},
		{"null", "w.json", `{"listen": null}`, []string{"listen: no value: give one, or leave the key out"}},
		{"nested list", "w.json", `{"etcd": [["a"]]}`, []string{"etcd: item 1 of the list is not a string, number or boolean"}},
		{"not an object", "w.json", `["listen"]`, []string{"not a JSON object of settings"}},
		{"trailing data", "w.json", `{"demo": true} {}`, []string{"unexpected data after the object of settings"}},
		{"empty", "w.yaml", "", []string{"the file is empty"}},
		{"bad yaml", "w.yaml", "listen: [x\n", []string{"--config"}},
		{"unknown extension", "w.toml", `listen = "x"`, []string{"must end in .json, .yaml or .yml"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, tc.file, tc.text)
			err := newTestFlags().f.Parse([]string{"--config", path})
			if !errors.As(err, new(usageError)) {
				t.Fatalf("Parse = %v; want a usage error", err)
			}
			for _, w := range append(tc.want, path) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestConfigMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "none.json")
	err := newTestFlags().f.Parse([]string{"--config", path})
	if want := "--config " + path + ": no such file or directory"; err == nil || err.Error() != want {
		t.Errorf("Parse = %v; want %q", err, want)
	}
}

// TestConfigInterspersed reads the file for commands with positional
// arguments too.
func TestConfigInterspersed(t *testing.T) {
	path := writeFile(t, "w.json", `{"capacity": 3}`)
	o := newTestFlags()
	pos, err := o.f.ParseInterspersed([]string{"a", "--config", path, "b"})
	if err != nil || strings.Join(pos, " ") != "a b" || o.cap != 3 {
		t.Errorf("ParseInterspersed = %v, %v, capacity %d; want [a b], nil, 3", pos, err, o.cap)
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{{"", "", 0}, {"listen", "listen", 0}, {"lisen", "listen", 1}, {"drain_timeout", "drain-timeout", 1}, {"htp", "http", 1}, {"kitten", "sitting", 3}, {"", "abc", 3}} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

// TestConfigHelp says the file loses to flags and the environment.
func TestConfigHelp(t *testing.T) {
	o := newTestFlags()
	out := o.f.s.Stdout.(*bytes.Buffer)
	o.f.Parse([]string{"--help"})
	for _, want := range []string{"both over --config", "--config file", "long flag names and servers", "MCPCANCEL_CONFIG"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, out)
		}
	}
}
