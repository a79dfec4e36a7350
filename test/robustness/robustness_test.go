package robustness

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpcancel/mcpcancel/internal/nodetest"
	"github.com/mcpcancel/mcpcancel/internal/releasetest"
)

var (
	soak     = flag.Duration("soak", 0, "run TestSoak for this long (e.g. 30m); 0 skips it")
	jsonOut  = flag.String("json", "", "write the run's summary as JSON to this file")
	seedFlag = flag.Int64("seed", 0, "replay this workload seed (0: a random one, printed)")
	late     = flag.Bool("late-placement", false, "let the operator decide calls by placement past their deadline")
	roles    = flag.String("upgrade-roles", "", "roll back only these roles in the upgrade fault, in turn, comma-separated (worker,gateway,coordinator)")
	kinds    = flag.String("faults", "", "run TestFaults with only these fault kinds, comma-separated, each once (e.g. silent_worker,drain_worker)")
)

// bins holds the binaries, built once by the first test that needs them:
// this tree's, and the last release's for the upgrade fault (old, empty
// with noOld saying why when the history cannot give it).
var bins struct {
	once                  sync.Once
	mcpcancel, etcdmember string
	old, oldRelease       string
	noOld                 error
	err                   error
}

// buildBins builds mcpcancel and etcdmember into dir.
func buildBins(dir string) {
	bins.mcpcancel = filepath.Join(dir, "mcpcancel")
	bins.etcdmember = filepath.Join(dir, "etcdmember")
	for out, pkg := range map[string]string{bins.mcpcancel: "./cmd/mcpcancel", bins.etcdmember: "./test/robustness/etcdmember"} {
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Dir = filepath.Join("..", "..")
		if b, err := cmd.CombinedOutput(); err != nil {
			bins.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
			return
		}
	}
	bins.old, bins.oldRelease, bins.err = buildOld(dir)
	if errors.Is(bins.err, releasetest.ErrNoHistory) {
		bins.noOld, bins.err = bins.err, nil
	}
}

// buildOld builds (or finds cached) the last release CHANGELOG.md records.
func buildOld(dir string) (bin, release string, err error) {
	root, err := releasetest.Root(".")
	if err != nil {
		return "", "", err
	}
	r, err := releasetest.Last(root)
	if err != nil {
		return "", "", err
	}
	bin, _, err = releasetest.BuildRelease(root, r, dir)
	return bin, "v" + r.Version, err
}

var binDir string

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "robustness-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// fixedSeed is the CI run's seed; a second, random seed follows it.
const fixedSeed = 20261128

// TestCluster is the short run CI does: real processes, real clients,
// faults of every kind, zero violations allowed.
func TestCluster(t *testing.T) {
	if *soak > 0 {
		t.Skip("-soak runs TestSoak instead")
	}
	// The fault schedule follows the fixed seed, so every run injects the
	// same kinds in the same order; the workload follows a random seed,
	// printed so a failure can be replayed with -seed.
	seed := time.Now().UnixNano()
	if *seedFlag != 0 {
		seed = *seedFlag
	}
	runAndCheck(t, RunOptions{
		Seed: seed, FaultSeed: fixedSeed, Duration: 90 * time.Second, MaxTime: 170 * time.Second,
		MinCalls: 2000, MinCancels: 500, MinFaults: 20, FaultGap: 2 * time.Second,
		GoHTTP: 10, GoStdio: 2, TS: 2, Tasks: 2,
		// The pairs the run must show (a gateway and a worker of either
		// release). Coordinators are rolled back by the soak and by
		// -upgrade-roles: under this load a coordinator's graceful stop
		// fails calls whatever the releases (issue 36, open).
		UpgradeRoles: []string{RoleWorker, RoleGateway},
	}, true)
}

// TestSoak is the long run, its flags after -args (go test has a -json of
// its own, and its default 10m timeout would stop the run):
// go test -timeout 60m ./test/robustness -run TestSoak -args -soak 30m -json out.json
func TestSoak(t *testing.T) {
	if *soak == 0 {
		t.Skip("pass -soak DURATION")
	}
	seed := time.Now().UnixNano()
	if *seedFlag != 0 {
		seed = *seedFlag
	}
	runAndCheck(t, RunOptions{
		Seed: seed, FaultSeed: seed, Duration: *soak, MaxTime: *soak + 10*time.Minute,
		FaultGap: 6 * time.Second, GoHTTP: 10, GoStdio: 2, TS: 1, Tasks: 2,
	}, false)
}

// TestFaults is a short run of chosen fault kinds, to work on one:
// go test ./test/robustness -run TestFaults -faults silent_worker,lost_complete_reply
func TestFaults(t *testing.T) {
	if *kinds == "" {
		t.Skip("pass -faults KIND,...")
	}
	for _, k := range strings.Split(*kinds, ",") {
		if !slices.Contains(faultKinds, k) && k != FUpgrade {
			t.Fatalf("no fault kind %q; there are %v", k, faultKinds)
		}
	}
	faultKinds = strings.Split(*kinds, ",")
	seed := time.Now().UnixNano()
	if *seedFlag != 0 {
		seed = *seedFlag
	}
	runAndCheck(t, RunOptions{
		Seed: seed, FaultSeed: fixedSeed, Duration: 20 * time.Second, MaxTime: 2 * time.Minute,
		MinFaults: len(faultKinds), FaultGap: 2 * time.Second, GoHTTP: 4, GoStdio: 1, Tasks: 1,
	}, false)
}

func runAndCheck(t *testing.T, o RunOptions, targets bool) {
	o.LatePlacement = *late
	t.Logf("seed %d, fault seed %d (replay: -seed %d)", o.Seed, o.FaultSeed, o.Seed)
	bins.once.Do(func() { buildBins(binDir) })
	if bins.err != nil {
		t.Fatal(bins.err)
	}
	o.Bin, o.EtcdBin = bins.mcpcancel, bins.etcdmember
	o.OldBin, o.OldRelease = bins.old, bins.oldRelease
	if *roles != "" {
		o.UpgradeRoles = strings.Split(*roles, ",")
		for _, r := range o.UpgradeRoles {
			if !slices.Contains(upgradeRoles, r) {
				t.Fatalf("no role %q; there are %v", r, upgradeRoles)
			}
		}
	}
	if bins.noOld != nil {
		t.Logf("NO UPGRADE FAULTS in this run: the last release cannot be built here: %v", bins.noOld)
	}
	dir, err := os.MkdirTemp("", "robustness-run-")
	if err != nil {
		t.Fatal(err)
	}
	o.Dir = dir
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("component logs kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	o.NodeDir = nodetest.Install(t)
	o.Log = func(format string, args ...any) { t.Logf(time.Now().Format("15:04:05.000 ")+format, args...) }
	ctx, cancel := context.WithTimeout(context.Background(), o.MaxTime+5*time.Minute)
	defer cancel()
	s, vs, err := Run(ctx, o)
	if s != nil {
		b, _ := json.Marshal(s)
		t.Logf("summary: %s", b)
		if *jsonOut != "" {
			if werr := os.WriteFile(*jsonOut, b, 0o644); werr != nil {
				t.Error(werr)
			}
		}
	}
	if err != nil {
		t.Fatalf("seed %d: %v (logs in %s)", o.Seed, err, o.Dir)
	}
	if len(vs) > 0 {
		t.Errorf("%s", Report(o.Seed, vs))
	}
	if !targets {
		return
	}
	kinds := 0
	for _, n := range s.FaultKinds {
		if n > 0 {
			kinds++
		}
	}
	if s.Calls < o.MinCalls || s.Cancels < o.MinCancels || s.FaultsInjected < o.MinFaults || kinds < 4 {
		t.Errorf("seed %d: run too small: %d calls (want %d), %d cancels (want %d), %d faults of %d kinds (want %d of 4)",
			o.Seed, s.Calls, o.MinCalls, s.Cancels, o.MinCancels, s.FaultsInjected, kinds, o.MinFaults)
	}
	if m := s.Releases; m != nil && (m.Rollbacks == 0 || m.Upgrades == 0 || m.OldGatewayNewWorker == 0 || m.NewGatewayOldWorker == 0) {
		t.Errorf("seed %d: the fleet did not cross releases both ways: %d rollbacks, %d upgrades, %d calls settled by an old gateway and a new worker, %d by a new gateway and an old worker (want each > 0)",
			o.Seed, m.Rollbacks, m.Upgrades, m.OldGatewayNewWorker, m.NewGatewayOldWorker)
	}
}
