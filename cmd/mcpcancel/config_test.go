package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
)

// writeConfig writes a --config file named name in a fresh directory.
func writeConfig(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConfigFileUnknownKey checks that every role reads --config and
// refuses a key that is no flag of its, naming it, before starting
// anything.
func TestConfigFileUnknownKey(t *testing.T) {
	for _, role := range []string{"coordinator", "gateway", "worker", "dev"} {
		t.Run(role, func(t *testing.T) {
			cfg := writeConfig(t, role+".yaml", "log-level: debug\nlisen: 127.0.0.1:0\n")
			var stdout, stderr bytes.Buffer
			code := Main(t.Context(), []string{role, "--config", cfg}, &stdout, &stderr)
			out := stderr.String()
			if code != 2 || !strings.Contains(out, `unknown key "lisen"`) || !strings.Contains(out, "for mcpcancel "+role) || !strings.Contains(out, "log-level") {
				t.Errorf("exit %d, stderr %q; want exit 2 naming the key and listing the keys there are", code, out)
			}
		})
	}
}

// TestConfigFileSetsFlags runs a coordinator whose etcd and listen
// address come from a --config file, and one where the environment
// overrides the file's unusable address: the environment wins over the
// file, as the command line wins over both (internal/cmdline's tests).
func TestConfigFileSetsFlags(t *testing.T) {
	etcd := etcdtest.Single(t)
	for _, tc := range []struct {
		name, file string
		env        []string
	}{
		{"file", `{"listen": "127.0.0.1:0", "etcd": "` + etcd.Endpoints()[0] + `"}`, nil},
		{"environment wins", `{"listen": "not-an-address", "etcd": "` + etcd.Endpoints()[0] + `"}`, []string{"MCPCANCEL_LISTEN=127.0.0.1:0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := writeConfig(t, "coordinator.json", tc.file)
			coord := start(t, tc.env, "coordinator", "--config", cfg)
			addr := coord.waitLine(t, "coordinator: ")
			if !strings.HasPrefix(addr, "127.0.0.1:") || addr == defaultCoordinator || addr == "127.0.0.1:0" {
				t.Fatalf("listening on %q; want the free port the file asked for", addr)
			}
			waitServing(t, dialTest(t, addr)) // reached the etcd named only in the file
			coord.signal(t, syscall.SIGINT)
			if code := coord.exitCode(t); code != 0 {
				t.Errorf("exited %d after SIGINT, want 0", code)
			}
		})
	}
}
