package charttest

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var (
	goLine     = regexp.MustCompile(`(?m)^go (\S+)$`)
	buildFrom  = regexp.MustCompile(`(?m)^FROM golang:([0-9.]+)-\S+ AS build$`)
	versionX   = regexp.MustCompile(`-X (\S+)=\$\{VERSION\}`)
	finalStage = regexp.MustCompile(`(?s)\nFROM ([^\n]+)\n(.*)$`)
)

// versionVar is the variable the Dockerfile stamps with VERSION.
func versionVar(t testing.TB) string {
	t.Helper()
	m := versionX.FindStringSubmatch(readFile(t, repoRoot+"/Dockerfile"))
	if m == nil {
		t.Fatal("the Dockerfile does not stamp the version with -X VAR=${VERSION}")
	}
	return m[1]
}

// TestDockerfile: the build stage uses go.mod's Go version and builds a
// static binary; the image runs it as a non-root user.
func TestDockerfile(t *testing.T) {
	df := readFile(t, repoRoot+"/Dockerfile")
	gomod := goLine.FindStringSubmatch(readFile(t, repoRoot+"/go.mod"))
	from := buildFrom.FindStringSubmatch(df)
	if gomod == nil || from == nil {
		t.Fatalf("go.mod go line %v, Dockerfile build stage %v", gomod, from)
	}
	if gomod[1] != from[1] {
		t.Errorf("Dockerfile builds with Go %s, go.mod says go %s", from[1], gomod[1])
	}
	if !strings.Contains(df, "CGO_ENABLED=0") {
		t.Error("the binary is not built static (CGO_ENABLED=0)")
	}
	final := finalStage.FindAllStringSubmatch(df, -1)
	last := final[len(final)-1]
	if !regexp.MustCompile(`(?m)^USER [1-9][0-9]*:[1-9][0-9]*$`).MatchString(last[2]) {
		t.Errorf("the final stage (FROM %s) does not run as a numeric non-root user", last[1])
	}
	if !strings.Contains(last[2], "ca-certificates.crt") {
		t.Error("the final image has no CA certificates")
	}
}

var (
	dockerTag  = regexp.MustCompile(`docker build --build-arg VERSION=(\S+) -t mcpcancel:(\S+) \.`)
	appVersion = regexp.MustCompile(`(?m)^appVersion: "([^"]+)"$`)
)

// TestImageTagsAgree: the tag the Dockerfile and the docs build is the
// chart's appVersion, its default image tag, and VERSION is it with a "v",
// so that what the docs build is what the chart pulls.
func TestImageTagsAgree(t *testing.T) {
	m := appVersion.FindStringSubmatch(readFile(t, chartDir+"/Chart.yaml"))
	if m == nil {
		t.Fatal("Chart.yaml has no quoted appVersion")
	}
	for _, p := range []string{repoRoot + "/Dockerfile", repoRoot + "/docs/deploy.md"} {
		builds := dockerTag.FindAllStringSubmatch(readFile(t, p), -1)
		if len(builds) == 0 {
			t.Errorf("%s: no docker build command", p)
		}
		for _, b := range builds {
			if b[2] != m[1] || b[1] != "v"+m[1] {
				t.Errorf("%s builds VERSION=%s as mcpcancel:%s; the chart pulls mcpcancel:%s (VERSION v%s)", p, b[1], b[2], m[1], m[1])
			}
		}
	}
}
