package charttest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
)

// TestRollout: in every scenario, `helm upgrade` replaces the gateways,
// coordinators and each worker fleet one pod at a time, a new pod ready
// before an old one stops, and a voluntary disruption (a node drain)
// takes at most a PodDisruptionBudget's worth of each, never all of a
// role with more than one replica (docs/upgrade.md).
func TestRollout(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			m := render(t, sc.values)
			for _, d := range all[*appsv1.Deployment](m) {
				switch component(&d.Spec.Template) {
				case "gateway", "coordinator", "worker":
				default:
					continue
				}
				checkStrategy(t, d)
				checkPDB(t, m, d)
			}
		})
	}
}

func checkStrategy(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	s := d.Spec.Strategy
	if s.Type != appsv1.RollingUpdateDeploymentStrategyType || s.RollingUpdate == nil ||
		s.RollingUpdate.MaxUnavailable == nil || s.RollingUpdate.MaxUnavailable.IntValue() != 0 ||
		s.RollingUpdate.MaxSurge == nil || s.RollingUpdate.MaxSurge.IntValue() < 1 {
		t.Errorf("Deployment %s: strategy %+v, want RollingUpdate with maxUnavailable 0 and a surge", d.Name, s)
	}
}

// checkPDB: exactly one PodDisruptionBudget selects d's pods; it lets a
// drain proceed (maxUnavailable at least 1) and keeps one pod of a role
// with more than one.
func checkPDB(t *testing.T, m *manifest, d *appsv1.Deployment) {
	t.Helper()
	var pdbs []*policyv1.PodDisruptionBudget
	for _, p := range all[*policyv1.PodDisruptionBudget](m) {
		if selects(p.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
			pdbs = append(pdbs, p)
		}
	}
	if len(pdbs) != 1 {
		t.Errorf("Deployment %s: %d PodDisruptionBudgets select its pods, want 1", d.Name, len(pdbs))
		return
	}
	replicas := int32(1)
	if d.Spec.Replicas != nil {
		replicas = *d.Spec.Replicas
	}
	mu := pdbs[0].Spec.MaxUnavailable
	if mu == nil || mu.IntValue() < 1 || (replicas > 1 && mu.IntValue() >= int(replicas)) {
		t.Errorf("Deployment %s (%d replicas): PDB %s maxUnavailable %v", d.Name, replicas, pdbs[0].Name, mu)
	}
}

// TestGatewayLeavesEndpointsFirst: by default a stopping gateway waits
// (preStop) for the Service's endpoints to drop it before it stops taking
// requests; its grace period covering that and --shutdown-grace is
// checked for every scenario in checkGracePeriods.
func TestGatewayLeavesEndpointsFirst(t *testing.T) {
	m := render(t, nil)
	for _, c := range mcpContainers(m, "gateway") {
		if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Sleep.Seconds < 1 {
			t.Errorf("gateway container %s has no preStop sleep: %+v", c.Name, c.Lifecycle)
		}
	}
}

// TestRoleImages: each role's image may be set apart, so that an upgrade
// can move coordinators, then workers, then gateways (docs/upgrade.md).
func TestRoleImages(t *testing.T) {
	m := render(t, nil, "image.repository=reg/mcpcancel", "image.tag=0.1.0",
		"coordinator.image.tag=0.2.0", "workers[0].name=demo", "workers[0].demo=true", "workers[0].image.tag=0.2.0")
	want := map[string]string{"coordinator": "reg/mcpcancel:0.2.0", "worker": "reg/mcpcancel:0.2.0", "gateway": "reg/mcpcancel:0.1.0"}
	for sub, img := range want {
		cs := mcpContainers(m, sub)
		if len(cs) == 0 {
			t.Errorf("no %s container", sub)
		}
		for _, c := range cs {
			if c.Image != img {
				t.Errorf("%s image %s, want %s", sub, c.Image, img)
			}
		}
	}
}

// lastRelease is the commit of the newest release in CHANGELOG.md, or
// "" before the first is recorded.
var lastRelease = regexp.MustCompile(`(?m)^## \[\d+\.\d+\.\d+\][^\n]*\n(?:\s*\n)*Commit: ([0-9a-f]{40})$`)

// upgradeFrom is the commit whose chart TestUpgradeFromLastRelease
// upgrades from: $CHART_UPGRADE_FROM, else the last release, else HEAD
// (before the first release, so that the check runs).
func upgradeFrom(t *testing.T) string {
	if ref := os.Getenv("CHART_UPGRADE_FROM"); ref != "" {
		return ref
	}
	if m := lastRelease.FindStringSubmatch(readFile(t, repoRoot+"/CHANGELOG.md")); m != nil {
		return m[1]
	}
	return "HEAD"
}

// chartAt extracts the chart as it was at ref into a temporary directory.
func chartAt(t *testing.T, ref string) string {
	t.Helper()
	dir := t.TempDir()
	archive := exec.Command("git", "archive", "--format=tar", ref, "helm/mcpcancel")
	archive.Dir = repoRoot
	tar, err := archive.Output()
	if err != nil {
		t.Fatalf("git archive %s helm/mcpcancel: %v", ref, err)
	}
	untar := exec.Command("tar", "-x", "-C", dir)
	untar.Stdin = strings.NewReader(string(tar))
	if out, err := untar.CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	return filepath.Join(dir, "helm", "mcpcancel")
}

func renderAt(t *testing.T, chart string) *manifest {
	t.Helper()
	args := templateArgs(nil)
	args[2] = chart
	out, err := helm(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeManifest(out, namespace)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestUpgradeFromLastRelease renders the last release's chart and this
// one with default values, as `helm upgrade` would apply them: every
// workload of the old release is still there under its name (a rename
// would start a second fleet and delete the first at once), and the
// fields Kubernetes will not change in place are unchanged (a change
// fails the upgrade).
func TestUpgradeFromLastRelease(t *testing.T) {
	ref := upgradeFrom(t)
	t.Logf("upgrading from the chart at %s", ref)
	old, cur := renderAt(t, chartAt(t, ref)), render(t, nil)
	for _, o := range all[*appsv1.Deployment](old) {
		if !has[*appsv1.Deployment](cur, o.Name) {
			t.Errorf("Deployment %s of %s is gone", o.Name, ref)
			continue
		}
		n := find[*appsv1.Deployment](t, cur, o.Name)
		same(t, "Deployment "+o.Name+" selector", o.Spec.Selector, n.Spec.Selector)
	}
	for _, o := range all[*appsv1.StatefulSet](old) {
		if !has[*appsv1.StatefulSet](cur, o.Name) {
			t.Errorf("StatefulSet %s of %s is gone", o.Name, ref)
			continue
		}
		n := find[*appsv1.StatefulSet](t, cur, o.Name)
		same(t, "StatefulSet "+o.Name+" selector", o.Spec.Selector, n.Spec.Selector)
		same(t, "StatefulSet "+o.Name+" serviceName", o.Spec.ServiceName, n.Spec.ServiceName)
		same(t, "StatefulSet "+o.Name+" volumeClaimTemplates", o.Spec.VolumeClaimTemplates, n.Spec.VolumeClaimTemplates)
	}
	for _, o := range all[*corev1.Service](old) {
		if has[*corev1.Service](cur, o.Name) {
			n := find[*corev1.Service](t, cur, o.Name)
			same(t, "Service "+o.Name+" clusterIP", o.Spec.ClusterIP, n.Spec.ClusterIP)
		}
	}
}

func same(t *testing.T, what string, old, cur any) {
	t.Helper()
	if !reflect.DeepEqual(old, cur) {
		t.Errorf("%s changed: %s -> %s", what, fmt.Sprint(old), fmt.Sprint(cur))
	}
}
