// Package version says which build of mcpcancel is running and what it
// speaks to its peers: the release, the commit it was built from, the Go
// that built it, the wire (protobuf package) and the etcd keyspace schema.
// `mcpcancel version`, the admin port's /version and the
// mcpcancel_build_info metric all report it.
package version

import (
	"fmt"
	"regexp"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// Release builds stamp these with -ldflags, as .goreleaser.yaml does:
//
//	-X github.com/mcpcancel/mcpcancel/internal/version.release=v0.1.0
//	-X github.com/mcpcancel/mcpcancel/internal/version.commit=<full sha>
var release, commit string

// Schema is the version of the etcd keyspace layout (under the
// coordinator's prefix, /mcpcancel/v1/ by default) that this build reads
// and writes. coordinator/schema.go records it in etcd and migrates a
// keyspace one version older to it; raise it with every change of layout
// and add the migration (docs/upgrade.md).
const Schema = 1

// Devel is the release of a build that was not stamped with one and was
// not installed at a tagged version.
const Devel = "devel"

// Info describes one build.
type Info struct {
	// Release is the release (v0.1.0), or Devel.
	Release string `json:"version"`
	// Commit is the full VCS revision built, "" when unknown.
	Commit string `json:"commit"`
	// Dirty says the work tree had uncommitted changes.
	Dirty bool `json:"dirty"`
	// Go is the toolchain that built the binary (go1.26.8).
	Go string `json:"go"`
	// Wire is the protobuf package of the API it speaks (mcpcancel.v1).
	Wire string `json:"wire"`
	// Schema is the etcd keyspace schema version it speaks.
	Schema int `json:"schema"`
}

// Get describes the running binary.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return fromBuild(release, commit, bi)
}

// Release is the running binary's release, or Devel.
func Release() string { return Get().Release }

// fromBuild describes a build stamped with release and commit (either
// may be "") and carrying bi (nil when the binary has no build info).
func fromBuild(release, commit string, bi *debug.BuildInfo) Info {
	info := Info{
		Release: release, Commit: commit, Go: runtime.Version(),
		Wire: string(pb.File_mcpcancel_v1_coordinator_proto.Package()), Schema: Schema,
	}
	if bi == nil {
		bi = &debug.BuildInfo{}
	} else {
		info.Go = bi.GoVersion
	}
	if info.Release == "" {
		info.Release = tagged(bi.Main.Version)
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if info.Commit == "" {
				info.Commit = s.Value
			}
		case "vcs.modified":
			info.Dirty = s.Value == "true"
		}
	}
	return info
}

// pseudo matches the tail of a Go pseudo-version
// (v0.0.0-20261204172800-3fbf764abcde), which names a commit, not a release.
var pseudo = regexp.MustCompile(`[.-](0\.)?\d{14}-[0-9a-f]{12}(\+dirty)?$`)

// tagged is the release a module version names: the version of a
// `go install ...@v0.1.0`, but Devel for a local build ("(devel)", or the
// pseudo-version that Go 1.24+ stamps from the VCS).
func tagged(v string) string {
	if v == "" || v == "(devel)" || pseudo.MatchString(v) || strings.HasSuffix(v, "+dirty") {
		return Devel
	}
	return v
}

// String is what `mcpcancel version` prints: the release on the first
// line, then one line per property.
func (i Info) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "mcpcancel %s\n", i.Release)
	c := i.Commit
	if c == "" {
		c = "unknown"
	}
	if i.Dirty {
		c += " (modified)"
	}
	fmt.Fprintf(&b, "  commit:  %s\n", c)
	fmt.Fprintf(&b, "  go:      %s %s/%s\n", i.Go, runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(&b, "  wire:    %s\n", i.Wire)
	fmt.Fprintf(&b, "  schema:  %d (etcd keyspace)\n", i.Schema)
	return b.String()
}

// Collector is the mcpcancel_build_info gauge: always 1, its labels
// describe the build, so that a dashboard can count the releases running.
func (i Info) Collector() prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mcpcancel_build_info",
		Help: "Always 1; the labels name the build: release, commit, Go version, wire and etcd schema versions.",
	}, []string{"version", "revision", "goversion", "wire", "schema"})
	g.WithLabelValues(i.Release, i.Commit, i.Go, i.Wire, strconv.Itoa(i.Schema)).Set(1)
	return g
}
