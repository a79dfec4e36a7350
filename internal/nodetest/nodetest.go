// Package nodetest runs the official MCP TypeScript clients and the MCP
// conformance suite from tests. Their npm packages are pinned by the
// lockfile in test/clients and installed there with `npm ci` on first use;
// a file lock keeps test packages running in parallel from installing at
// once.
package nodetest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
)

// Dir is test/clients, found from this source file.
func Dir(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("nodetest: cannot locate the repository")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "test", "clients")
}

// Install makes sure test/clients/node_modules matches the lockfile and
// returns the directory. It fails the test when node or npm is missing:
// these tests are part of the suite, not optional.
func Install(t testing.TB) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("nodetest: %s is not installed; the MCP client tests need Node.js 20+", tool)
		}
	}
	dir := Dir(t)
	install(t, dir)
	return dir
}

// install runs `npm ci` in dir unless its node_modules already match its
// lockfile, holding dir's install lock meanwhile.
func install(t testing.TB, dir string) {
	t.Helper()
	lock, err := os.OpenFile(filepath.Join(dir, ".install.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	want, err := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	stamp := filepath.Join(dir, "node_modules", ".mcpcancel-installed")
	if got, err := os.ReadFile(stamp); err == nil && bytes.Equal(got, want) {
		return
	}
	cmd := exec.CommandContext(context.Background(), "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nodetest: npm ci in %s: %v\n%s", dir, err, out)
	}
	if err := os.WriteFile(stamp, want, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Node returns a command running node with args in test/clients.
func Node(t testing.TB, ctx context.Context, args ...string) *exec.Cmd {
	dir := Install(t)
	cmd := exec.CommandContext(ctx, "node", args...)
	cmd.Dir = dir
	return cmd
}
