package version

import (
	"runtime/debug"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func vcs(rev, modified string) []debug.BuildSetting {
	return []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
}

// TestFromBuild: a stamped release and commit win; else a tagged module
// version is the release and anything else is Devel; the commit and
// dirty flag come from the VCS stamp.
func TestFromBuild(t *testing.T) {
	const rev = "3fbf764abcdef0123456789abcdef0123456789a"
	for _, tc := range []struct {
		name            string
		release, commit string
		bi              *debug.BuildInfo
		want            Info
	}{
		{"stamped", "v0.1.0", "feed", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: vcs(rev, "false")},
			Info{Release: "v0.1.0", Commit: "feed", Go: "go1.26.8"}},
		{"go build in a clone", "", "", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261204172800-3fbf764abcde"}, Settings: vcs(rev, "false")},
			Info{Release: Devel, Commit: rev, Go: "go1.26.8"}},
		{"dirty clone", "", "", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.1.1-0.20261204172800-3fbf764abcde+dirty"}, Settings: vcs(rev, "true")},
			Info{Release: Devel, Commit: rev, Dirty: true, Go: "go1.26.8"}},
		{"dirty at a tag", "", "", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.1.0+dirty"}, Settings: vcs(rev, "true")},
			Info{Release: Devel, Commit: rev, Dirty: true, Go: "go1.26.8"}},
		{"prerelease pseudo-version", "", "", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.2.0-rc.1.0.20261204172800-3fbf764abcde"}},
			Info{Release: Devel, Go: "go1.26.8"}},
		{"go install at a tag", "", "", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.1.0"}},
			Info{Release: "v0.1.0", Go: "go1.26.8"}},
		{"no VCS", "", "", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			Info{Release: Devel, Go: "go1.26.8"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.want.Wire, tc.want.Schema = "mcpcancel.v1", Schema
			if got := fromBuild(tc.release, tc.commit, tc.bi); got != tc.want {
				t.Errorf("fromBuild = %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestGet: the test binary is not stamped, so it is Devel, speaking the
// wire of the generated API.
func TestGet(t *testing.T) {
	i := Get()
	if i.Release != Devel || i.Wire != "mcpcancel.v1" || i.Schema != Schema || !strings.HasPrefix(i.Go, "go") {
		t.Errorf("Get() = %+v", i)
	}
}

func TestString(t *testing.T) {
	got := Info{Release: "v0.1.0", Commit: "abc", Dirty: true, Go: "go1.26.8", Wire: "mcpcancel.v1", Schema: 1}.String()
	for _, want := range []string{"mcpcancel v0.1.0\n", "commit:  abc (modified)\n", "go:      go1.26.8 ", "wire:    mcpcancel.v1\n", "schema:  1 "} {
		if !strings.Contains(got, want) {
			t.Errorf("String() lacks %q:\n%s", want, got)
		}
	}
}

func TestCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(Info{Release: "v0.1.0", Commit: "abc", Go: "go1.26.8", Wire: "mcpcancel.v1", Schema: 1}.Collector())
	want := `# HELP mcpcancel_build_info Always 1; the labels name the build: release, commit, Go version, wire and etcd schema versions.
# TYPE mcpcancel_build_info gauge
mcpcancel_build_info{goversion="go1.26.8",revision="abc",schema="1",version="v0.1.0",wire="mcpcancel.v1"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
