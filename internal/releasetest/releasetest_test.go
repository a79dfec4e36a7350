package releasetest

import (
	"errors"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLast(t *testing.T) {
	root, err := Root(".")
	if errors.Is(err, ErrNoHistory) {
		t.Skip(err)
	}
	r, err := Last(root)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^\d+\.\d+\.\d+$`).MatchString(r.Version) || !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(r.Commit) {
		t.Fatalf("last release %+v: want a version and a full commit id", r)
	}
}

func TestNoHistory(t *testing.T) {
	if _, err := Root(t.TempDir()); !errors.Is(err, ErrNoHistory) {
		t.Fatalf("Root outside a checkout: %v, want ErrNoHistory", err)
	}
	root, err := Root(".")
	if errors.Is(err, ErrNoHistory) {
		t.Skip(err)
	}
	missing := Release{Version: "9.9.9", Commit: strings.Repeat("0", 40)}
	if _, _, err := BuildRelease(root, missing, t.TempDir()); !errors.Is(err, ErrNoHistory) {
		t.Fatalf("BuildRelease of a commit not in the history: %v, want ErrNoHistory", err)
	}
}

// Builders at once get one binary, built by at most one of them, and it
// runs.
func TestBuildReleaseOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("may build the last release")
	}
	root, err := Root(".")
	if errors.Is(err, ErrNoHistory) {
		t.Skip(err)
	}
	r, err := Last(root)
	if err != nil {
		t.Fatal(err)
	}
	scratch := t.TempDir()
	var wg sync.WaitGroup
	bins, builds, errs := make([]string, 2), make([]bool, 2), make([]error, 2)
	for i := range 2 {
		wg.Go(func() { bins[i], builds[i], errs[i] = BuildRelease(root, r, scratch) })
	}
	wg.Wait()
	if errors.Is(errs[0], ErrNoHistory) {
		t.Skip(errs[0])
	}
	if errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	if bins[0] != bins[1] || builds[0] && builds[1] {
		t.Fatalf("binaries %v, built %v: want one binary built at most once", bins, builds)
	}
	out, err := exec.Command(bins[0], "version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s version: %v\n%s", bins[0], err, out)
	}
}
