// Package upgrade runs fleets of two releases side by side, as a rolling
// upgrade does: the last release recorded in CHANGELOG.md, built from the
// repository's history at its commit, beside this tree. Each role may run
// one release apart from the others (docs/upgrade.md); every combination
// here settles each call exactly once, as its client saw it.
package upgrade

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/releasetest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, etcdtest.IgnoreLeaks(
		goleak.IgnoreAnyFunction("net/http.(*conn).serve"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
	)...)
}

// A fleet of the last release and this tree, role by role: a gateway of
// one release with a coordinator or worker of the other, and two
// coordinators of different releases side by side. Calls begun beside
// their work (this tree) cross the line: a gateway falls back to
// Begin-first against an older coordinator, a coordinator places an
// older worker's calls Begin-first, and a worker attached to an older
// coordinator is placed Begin-first too, since that coordinator does
// not pass on what the worker advertises.
func TestMixedFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the last release")
	}
	old, cur := releases(t)
	for _, tc := range []struct {
		name            string
		coords          []string // binaries of the coordinators; the worker attaches to the last
		worker, gateway string
		// beside says whether calls run beside their Begin (Start, on
		// this tree's coordinator): "none", "some", or "any" where the
		// gateway's fallback decides (one Start refused by the older
		// coordinator places the next 10 s of calls Begin-first).
		beside string
	}{
		{"old gateway", []string{cur}, cur, old, "none"},
		{"old worker", []string{cur}, old, cur, "none"},
		{"old coordinator", []string{old}, cur, cur, "none"},
		{"worker on the old of two coordinators", []string{cur, old}, cur, cur, "none"},
		{"worker on the new of two coordinators", []string{old, cur}, cur, cur, "any"},
		{"this tree", []string{cur}, cur, cur, "some"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startFleet(t, tc.coords, tc.worker, tc.gateway)
			f.exercise(t)
			beside := 0.0
			for i, bin := range tc.coords {
				if bin == cur {
					beside += f.metric(t, i, `mcpcancel_coordinator_starts_total{mode="beside"}`)
				}
			}
			if tc.beside != "any" && (beside > 0) != (tc.beside == "some") {
				t.Fatalf("%v calls ran beside their Begin; want %s", beside, tc.beside)
			}
			t.Logf("%v calls ran beside their Begin", beside)
		})
	}
}

// fleet is one mixed fleet on an embedded etcd.
type fleet struct {
	cli    *clientv3.Client
	url    string   // the gateway's MCP endpoint
	admins []string // the coordinators' admin addresses
}

// metric reads one sample of coordinator i's /metrics, 0 if absent.
func (f *fleet) metric(t *testing.T, i int, sample string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + f.admins[i] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), sample+" "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	return 0
}

func startFleet(t *testing.T, coords []string, workerBin, gatewayBin string) *fleet {
	t.Helper()
	ec := etcdtest.Single(t)
	dir := t.TempDir()
	var coordAddrs, admins []string
	for i, bin := range coords {
		addr, admin := freeAddr(t), freeAddr(t)
		run(t, dir, fmt.Sprintf("coord%d", i), bin, "coordinator", "--listen", addr, "--admin", admin,
			"--etcd", strings.Join(ec.Endpoints(), ","), "--name", fmt.Sprintf("c%d", i), "--shutdown-timeout", "2s")
		coordAddrs, admins = append(coordAddrs, addr), append(admins, admin)
	}
	wAddr := freeAddr(t)
	run(t, dir, "worker", workerBin, "worker", "--demo", "--name", "w1", "--listen", wAddr, "--advertise", wAddr,
		"--coordinator", coordAddrs[len(coordAddrs)-1])
	gAddr := freeAddr(t)
	run(t, dir, "gateway", gatewayBin, "gateway", "--http", gAddr, "--coordinator", strings.Join(coordAddrs, ","),
		"--name", "gw1", "--shutdown-grace", "1s")
	f := &fleet{cli: ec.Client(), url: "http://" + gAddr + "/mcp", admins: admins}
	testcluster.WaitFor(t, "the fleet to serve echo", func() bool {
		cs, err := f.connect(t.Context(), nil)
		if err != nil {
			return false
		}
		defer cs.Close()
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "ready"}})
		return err == nil && !res.IsError
	})
	return f
}

func (f *fleet) connect(ctx context.Context, progress func()) (*mcp.ClientSession, error) {
	c := mcp.NewClient(&mcp.Implementation{Name: "upgrade-test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
			if progress != nil {
				progress()
			}
		},
	})
	return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: f.url, MaxRetries: -1}, nil)
}

// exercise runs calls that complete and calls their client cancels, and
// checks that each has exactly one record, saying what the client saw.
func (f *fleet) exercise(t *testing.T) {
	t.Helper()
	const completed, cancelled = 20, 10
	started := make(chan struct{}, 1)
	cs, err := f.connect(t.Context(), func() {
		select {
		case started <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for i := range completed {
		text := fmt.Sprintf("call %d", i)
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": text}})
		if err != nil || res.IsError || len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != text {
			t.Fatalf("echo %d: %v, %v", i, res, err)
		}
	}
	for i := range cancelled {
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		var callErr error
		wg.Go(func() {
			params := &mcp.CallToolParams{Name: "sleep", Arguments: map[string]any{"seconds": 30, "steps": 300}}
			params.SetProgressToken(fmt.Sprintf("p%d", i))
			_, callErr = cs.CallTool(ctx, params)
		})
		select {
		case <-started:
		case <-time.After(15 * time.Second):
			t.Fatalf("sleep %d never reported progress", i)
		}
		cancel()
		wg.Wait()
		if callErr == nil {
			t.Fatalf("sleep %d answered after its client cancelled it", i)
		}
	}
	var got map[string]int
	testcluster.WaitFor(t, "every call's record", func() bool {
		got = outcomesOf(testcluster.Audits(t, f.cli))
		return got["completed"] >= completed+1 && got["cancelled"] >= cancelled
	})
	// One record per call: the ready probe's echo, the echoes, the sleeps.
	if got["completed"] != completed+1 || got["cancelled"] != cancelled || len(got) != 2 {
		t.Fatalf("records by outcome: %v, want %d completed and %d cancelled", got, completed+1, cancelled)
	}
}

// outcomesOf counts audit records by outcome, failing on a call with two.
func outcomesOf(as map[string][]*coordinator.AuditRecord) map[string]int {
	out := map[string]int{}
	for _, recs := range as {
		for _, a := range recs {
			out[a.Outcome]++
		}
		if len(recs) > 1 {
			out["more than one record"]++
		}
	}
	return out
}

// run starts bin with args as its own process, logging to dir/name.log,
// and stops it when the test ends.
func run(t *testing.T, dir, name, bin string, args ...string) {
	t.Helper()
	log, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { // owned: reaped here, awaited in Cleanup
		cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		log.Close()
		if t.Failed() {
			if b, err := os.ReadFile(log.Name()); err == nil {
				t.Logf("%s's log:\n%s", name, tail(b, 40))
			}
		}
	})
}

func tail(b []byte, lines int) string {
	ls := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(ls[max(0, len(ls)-lines):], "\n")
}

// freeAddr is a loopback address free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// releases builds this tree and the last release, skipping the test
// where the repository's history cannot give the release.
func releases(t *testing.T) (old, cur string) {
	t.Helper()
	root, err := releasetest.Root(".")
	if err == nil {
		var r releasetest.Release
		if r, err = releasetest.Last(root); err != nil {
			t.Fatal(err)
		}
		var built bool
		old, built, err = releasetest.BuildRelease(root, r, t.TempDir())
		if built {
			t.Logf("built %v", r)
		}
	}
	if errors.Is(err, releasetest.ErrNoHistory) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	cur = filepath.Join(t.TempDir(), "mcpcancel-current")
	if err := releasetest.Build(root, cur); err != nil {
		t.Fatal(err)
	}
	return old, cur
}
