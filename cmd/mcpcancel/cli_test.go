package main

import (
	"bytes"
	"strings"
	"testing"
)

// runBinary runs the binary to its end and returns its stdout.
func runBinary(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := command(args...).Output()
	return string(out), err
}

// TestCommandLines runs, in process, command lines that end before they
// serve anything.
func TestCommandLines(t *testing.T) {
	for _, tc := range []struct {
		name      string
		args, env []string
		code      int
		stdout    []string // substrings, in order
		stderr    []string
	}{
		{"no command", nil, nil, 2, nil, []string{"Usage: mcpcancel COMMAND"}},
		{"unknown command", []string{"serve"}, nil, 2, nil, []string{`unknown command "serve"`, "Usage: mcpcancel COMMAND"}},
		{"help", []string{"help"}, nil, 0, []string{"coordinator", "worker", "version", "MCPCANCEL_"}, nil},
		{"--help", []string{"--help"}, nil, 0, []string{"Usage: mcpcancel COMMAND"}, nil},
		{"help for a command", []string{"help", "worker"}, nil, 0, []string{
			"Usage: mcpcancel worker [flags]",
			"--advertise HOST:PORT", `default ""; env MCPCANCEL_ADVERTISE`,
			"--capacity int", "default 0; env MCPCANCEL_CAPACITY",
			"--coordinator address", "default 127.0.0.1:7801; env MCPCANCEL_COORDINATOR",
			"--demo\n", "default false; env MCPCANCEL_DEMO",
			"--drain-timeout duration", "default 30s; env MCPCANCEL_DRAIN_TIMEOUT",
			"--listen HOST:PORT", "default 127.0.0.1:0; env MCPCANCEL_LISTEN",
			"--log-level level", "default INFO; env MCPCANCEL_LOG_LEVEL",
			"--name name", `default ""; env MCPCANCEL_NAME`,
		}, nil},
		{"coordinator --help", []string{"coordinator", "--help"}, nil, 0, []string{
			"--etcd URLs", "default http://127.0.0.1:2379; env MCPCANCEL_ETCD",
			"--lease-ttl duration", "default 10s; env MCPCANCEL_LEASE_TTL",
			"--listen HOST:PORT", "default 127.0.0.1:7801; env MCPCANCEL_LISTEN",
			"--prefix prefix", "default /mcpcancel/v1/; env MCPCANCEL_PREFIX",
			"--retention duration", "default 24h0m0s; env MCPCANCEL_RETENTION",
		}, nil},
		{"help for no command", []string{"help", "serve"}, nil, 2, nil, []string{`no command "serve"`}},
		{"worker without tools", []string{"worker"}, nil, 2, nil, []string{"mcpcancel worker: " + ErrNoTools.Error()}},
		{"bad flag", []string{"worker", "--demo", "--capacity", "x"}, nil, 2, nil, []string{`invalid value "x" for flag -capacity`, "mcpcancel help worker"}},
		{"stray argument", []string{"worker", "--demo", "extra"}, nil, 2, nil, []string{`unexpected argument "extra"`}},
		{"flag from env", []string{"worker", "--demo"}, []string{"MCPCANCEL_CAPACITY=-1"}, 2, nil, []string{"--capacity must not be negative"}},
		{"bad env value", []string{"worker"}, []string{"MCPCANCEL_DEMO=maybe"}, 2, nil, []string{`MCPCANCEL_DEMO="maybe": invalid value for --demo`}},
		{"command line wins", []string{"worker", "--demo=false"}, []string{"MCPCANCEL_DEMO=true"}, 2, nil, []string{ErrNoTools.Error()}},
		{"empty env is unset", []string{"worker"}, []string{"MCPCANCEL_DEMO="}, 2, nil, []string{ErrNoTools.Error()}},
		{"nothing to advertise", []string{"worker", "--demo", "--listen", ":7802"}, nil, 2, nil, []string{"pass --advertise HOST:PORT"}},
		{"nothing to advertise either", []string{"worker", "--demo", "--listen", "0.0.0.0:7802"}, nil, 2, nil, []string{"pass --advertise HOST:PORT"}},
		{"bad duration", []string{"coordinator", "--lease-ttl", "0s"}, nil, 2, nil, []string{"--lease-ttl must be positive, not 0s"}},
		{"no etcd", []string{"coordinator", "--etcd", " , "}, nil, 2, nil, []string{ErrNoEtcd.Error()}},
		{"cannot listen", []string{"coordinator", "--listen", "127.0.0.1:99999"}, nil, 1, nil, []string{"mcpcancel coordinator: --listen 127.0.0.1:99999: listen tcp"}},
		{"bad log level", []string{"worker", "--demo", "--log-level", "banana"}, nil, 2, nil, []string{`invalid value "banana" for flag -log-level: want debug, info, warn or error`}},
		{"log level in capitals", []string{"worker", "--demo", "--log-level", "WARN", "--listen", "x"}, nil, 1, nil, []string{"--listen x: listen tcp: address x: missing port"}},
		{"bad protocol version", []string{"call", "--protocol-version", "banana", "echo"}, nil, 2, nil, []string{`--protocol-version "banana": want one of 2026-07-28, 2025-11-25,`}},
		{"calls with an argument", []string{"calls", "x"}, nil, 2, nil, []string{`unexpected argument "x"`}},
		{"calls with no coordinator", []string{"calls", "--coordinator", "127.0.0.1:1"}, nil, 1, nil, []string{"mcpcancel calls: cannot reach the coordinator at 127.0.0.1:1"}},
		{"bad session mode", []string{"dev", "--upstream-stdio", "sh", "--upstream-sessions", "banana"}, nil, 2, nil, []string{`--upstream-sessions: upstream sessions must be "per-client" or "shared", not "banana"`}},
		{"etcd unreachable", []string{"coordinator", "--listen", "127.0.0.1:0", "--etcd", "http://127.0.0.1:1"}, nil, 1, nil, []string{
			"coordinator: 127.0.0.1:", "mcpcancel coordinator: cannot read the coordinator's state from etcd at http://127.0.0.1:1",
		}},
		{"version", []string{"version"}, nil, 0, []string{"mcpcancel ", "commit:", "wire:    mcpcancel.v1", "schema:  1"}, nil},
		{"version with arguments", []string{"version", "now"}, nil, 2, nil, []string{`unexpected argument "now"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, kv := range tc.env {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			var stdout, stderr bytes.Buffer
			code := Main(t.Context(), tc.args, &stdout, &stderr)
			if code != tc.code {
				t.Errorf("exit status %d, want %d", code, tc.code)
			}
			inOrder(t, "stdout", stdout.String(), tc.stdout)
			inOrder(t, "stderr", stderr.String(), tc.stderr)
			if tc.stdout == nil && stdout.Len() > 0 {
				t.Errorf("unexpected stdout:\n%s", stdout.String())
			}
			if t.Failed() {
				t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
			}
		})
	}
}

// inOrder checks that out holds each of want, in order.
func inOrder(t *testing.T, what, out string, want []string) {
	t.Helper()
	for _, w := range want {
		i := strings.Index(out, w)
		if i < 0 {
			t.Errorf("%s lacks %q (or has it out of order)", what, w)
			return
		}
		out = out[i+len(w):]
	}
}
