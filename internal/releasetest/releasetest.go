// Package releasetest builds the mcpcancel binaries that tests run side
// by side as a rolling upgrade does: this tree, and the last release that
// CHANGELOG.md records, built from the repository's history at its
// commit. A release's binary is built once per machine, cached by commit
// under the user's cache directory, and a lock keeps test binaries that
// build at once from doing the work twice.
package releasetest

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// ErrNoHistory says a release cannot be built here: the tree is not a git
// checkout, or its history lacks the release's commit (a shallow clone).
// Tests skip what needs the release, and say so.
var ErrNoHistory = errors.New("releasetest: no git history to build the release from")

// Release is a release CHANGELOG.md records.
type Release struct {
	Version string // "0.1.0"
	Commit  string // the full commit id it was built from
}

func (r Release) String() string {
	return "v" + r.Version + " (" + r.Commit[:min(12, len(r.Commit))] + ")"
}

// Root is the top of the git checkout that holds dir.
func Root(dir string) (string, error) {
	cmd := exec.Command("git", "rev-parse", "--show-toplevel")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%w: %s is not in a git checkout: %v", ErrNoHistory, dir, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// Last is the newest release root/CHANGELOG.md records with its commit.
func Last(root string) (Release, error) {
	f, err := os.Open(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		return Release{}, err
	}
	defer f.Close()
	heading := regexp.MustCompile(`^## \[(\d+\.\d+\.\d+)\]`)
	var version string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := heading.FindStringSubmatch(sc.Text()); m != nil {
			version = m[1]
		}
		if c, ok := strings.CutPrefix(sc.Text(), "Commit: "); ok && version != "" {
			return Release{Version: version, Commit: strings.TrimSpace(c)}, nil
		}
	}
	if err := sc.Err(); err != nil {
		return Release{}, err
	}
	return Release{}, errors.New("releasetest: CHANGELOG.md records no release with its commit")
}

// Build builds ./cmd/mcpcancel of the module in dir into out.
func Build(dir, out string) error {
	cmd := exec.Command("go", "build", "-o", out, "./cmd/mcpcancel")
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build in %s: %v\n%s", dir, err, b)
	}
	return nil
}

// BuildRelease returns the binary of release r, built from root's history
// at its commit the first time on this machine (built says so) and cached
// by commit after. scratch holds the extracted source, and the cache when
// the user has no cache directory. It returns ErrNoHistory when root's
// history lacks r's commit.
func BuildRelease(root string, r Release, scratch string) (bin string, built bool, err error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = scratch
	}
	dir := filepath.Join(cache, "mcpcancel-upgrade-test")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", false, err
	}
	bin = filepath.Join(dir, "mcpcancel-"+r.Commit)
	unlock, err := lock(bin + ".lock")
	if err != nil {
		return "", false, err
	}
	defer unlock()
	if _, err := os.Stat(bin); err == nil {
		return bin, false, nil
	}
	if err := hasCommit(root, r.Commit); err != nil {
		return "", false, err
	}
	src, err := os.MkdirTemp(scratch, "v"+r.Version+"-")
	if err != nil {
		return "", false, err
	}
	defer os.RemoveAll(src)
	archive := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", root, r.Commit, src)
	if b, err := archive.CombinedOutput(); err != nil {
		return "", false, fmt.Errorf("extracting %v: %v\n%s", r, err, b)
	}
	tmp := fmt.Sprintf("%s.%d.tmp", bin, os.Getpid())
	if err := Build(src, tmp); err != nil {
		return "", false, err
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", false, err
	}
	return bin, true, nil
}

// hasCommit says whether root's history holds commit.
func hasCommit(root, commit string) error {
	cmd := exec.Command("git", "-C", root, "cat-file", "-e", commit+"^{commit}")
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w: %s lacks commit %s (a shallow clone?)", ErrNoHistory, root, commit)
	}
	return nil
}
