package charttest

import (
	"path"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// fileFlags are the mcpcancel flags whose value is a file the process
// reads (`mcpcancel SUB --help` shows them as "--NAME file";
// TestFileFlagsKnown keeps this list whole).
var fileFlags = map[string]bool{
	"tls-cert": true, "tls-key": true, "tls-ca": true,
	"tokens-file": true, "jwks-file": true, "auth-policy": true, "state-key-file": true,
	"etcd-cert": true, "etcd-key": true, "etcd-ca": true, "etcd-password-file": true,
	"upstream-config": true, "upstream-header-file": true, "upstream-client-secret-file": true,
	"config": true,
}

// fileArg is a file a container is told to read: by a flag, or by the
// MCPCANCEL_<FLAG> variable that sets it.
type fileArg struct{ flag, path string }

func (f fileArg) String() string { return "--" + f.flag + "=" + f.path }

// fileArgs are the files c's args and environment name.
func fileArgs(c corev1.Container) []fileArg {
	var out []fileArg
	for _, a := range c.Args {
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if ok && strings.HasPrefix(a, "--") && fileFlags[name] {
			out = append(out, fileArg{name, value})
		}
	}
	for _, e := range c.Env {
		name, ok := strings.CutPrefix(e.Name, "MCPCANCEL_")
		flag := strings.ToLower(strings.ReplaceAll(name, "_", "-"))
		if ok && fileFlags[flag] && e.Value != "" {
			out = append(out, fileArg{flag, e.Value})
		}
	}
	return out
}

// checkMounts: every file an mcpcancel container is told to read lies
// under one of its volumeMounts, from a volume its pod has; a file in a
// Secret or ConfigMap the chart renders is one of its keys. Otherwise the
// process exits at start on a file that is not there.
func checkMounts(t *testing.T, m *manifest) {
	t.Helper()
	for _, w := range workloads(m) {
		for _, c := range w.Pod.Spec.Containers {
			if subcommand(c) == "" {
				continue
			}
			for _, f := range fileArgs(c) {
				if err := mountedFile(m, w.Pod, c, f.path); err != "" {
					t.Errorf("%s %s/%s: %s: %s", w.Kind, w.Name, c.Name, f, err)
				}
			}
		}
	}
}

// mountedFile says why file is not readable in c, or "".
func mountedFile(m *manifest, pod *corev1.PodTemplateSpec, c corev1.Container, file string) string {
	if !path.IsAbs(file) {
		return "not an absolute path"
	}
	var mount *corev1.VolumeMount
	rel := ""
	for i, vm := range c.VolumeMounts {
		r, ok := under(file, vm.MountPath)
		if ok && (mount == nil || len(vm.MountPath) > len(mount.MountPath)) {
			mount, rel = &c.VolumeMounts[i], r
		}
	}
	if mount == nil {
		return "no volumeMount of the container holds it"
	}
	var vol *corev1.Volume
	for i, v := range pod.Spec.Volumes {
		if v.Name == mount.Name {
			vol = &pod.Spec.Volumes[i]
		}
	}
	if vol == nil {
		return "volumeMount " + mount.Name + " names no volume of the pod"
	}
	if mount.SubPath != "" {
		rel = path.Join(mount.SubPath, rel)
	}
	return keyIn(m, *vol, rel)
}

// under is file's path inside dir, and whether it is inside.
func under(file, dir string) (string, bool) {
	if file == dir {
		return "", true
	}
	rel, ok := strings.CutPrefix(file, strings.TrimSuffix(dir, "/")+"/")
	return rel, ok
}

// keyIn says why rel is not a file of vol, or "": a Secret or ConfigMap
// the chart renders must have it as a key (through items, if any);
// an emptyDir holds nothing at start.
func keyIn(m *manifest, vol corev1.Volume, rel string) string {
	var name string
	var items []corev1.KeyToPath
	keys := map[string]bool{}
	switch {
	case vol.EmptyDir != nil:
		return "volume " + vol.Name + " is an emptyDir, which holds no file at start"
	case vol.Secret != nil:
		name, items = vol.Secret.SecretName, vol.Secret.Items
		if !has[*corev1.Secret](m, name) {
			return "" // the user's Secret: its keys are theirs to know
		}
		for k := range findIn[*corev1.Secret](m, name).Data {
			keys[k] = true
		}
	case vol.ConfigMap != nil:
		name, items = vol.ConfigMap.Name, vol.ConfigMap.Items
		if !has[*corev1.ConfigMap](m, name) {
			return ""
		}
		for k := range findIn[*corev1.ConfigMap](m, name).Data {
			keys[k] = true
		}
	default:
		return ""
	}
	key := rel
	if items != nil {
		key = ""
		for _, it := range items {
			if it.Path == rel {
				key = it.Key
			}
		}
	}
	if !keys[key] {
		return "volume " + vol.Name + " (of " + name + ") has no file " + rel
	}
	return ""
}

// findIn is the rendered object of type T named name (has says whether it is there).
func findIn[T any](m *manifest, name string) T {
	for _, o := range m.Objects {
		if v, ok := o.Obj.(T); ok && o.Name == name {
			return v
		}
	}
	var zero T
	return zero
}

// TestFileFlagsKnown: every flag `mcpcancel SUB --help` shows as taking a
// file is one checkMounts looks at.
func TestFileFlagsKnown(t *testing.T) {
	for _, sub := range []string{"gateway", "coordinator", "worker"} {
		for name, placeholder := range helpPlaceholders(t, sub) {
			if placeholder == "file" && !fileFlags[name] {
				t.Errorf("mcpcancel %s --%s takes a file, but checkMounts does not know it: add it to fileFlags", sub, name)
			}
		}
	}
}

var hexKey = regexp.MustCompile(`^[0-9a-f]{64}\n?$`)

// checkStateKey: gateways share the key that seals 2026-07-28 multi
// round-trip state, so a retry at another replica (there are two during
// every rollout) opens what the first sealed; a key the chart makes is
// what --state-key-file reads (64 hex digits).
func checkStateKey(t *testing.T, m *manifest) {
	t.Helper()
	for _, w := range workloads(m) {
		for _, c := range w.Pod.Spec.Containers {
			if subcommand(c) != "gateway" {
				continue
			}
			file, ok := flagValue(c.Args, "state-key-file")
			if !ok {
				t.Errorf("%s %s: no --state-key-file: each replica seals with a key of its own", w.Kind, w.Name)
				continue
			}
			for _, s := range all[*corev1.Secret](m) {
				if v, ok := s.Data[path.Base(file)]; ok && !hexKey.Match(v) {
					t.Errorf("Secret %s: %s is %d bytes, not 64 hex digits", s.Name, path.Base(file), len(v))
				}
			}
		}
	}
}
