package charttest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
)

const full = release + "-mcpcancel"

// scenario is one way of installing the chart.
type scenario struct {
	name   string
	values []string // files in testdata
	check  func(t *testing.T, m *manifest)
}

var scenarios = []scenario{
	{"default", nil, checkDefault},
	{"external-etcd-tls", []string{"external-etcd-tls.yaml"}, checkExternalEtcd},
	{"embedded-etcd", []string{"embedded-etcd.yaml"}, checkEmbeddedEtcd},
	{"two-fleets", []string{"two-fleets.yaml"}, checkTwoFleets},
	{"mtls-secrets", []string{"mtls-secrets.yaml"}, checkMTLSSecrets},
	{"everything", []string{"everything.yaml"}, checkEverything},
}

// TestScenarios renders each scenario, decodes it strictly, and checks the
// invariants every rendering keeps and the scenario's own.
func TestScenarios(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			m := render(t, sc.values)
			checkCommon(t, m)
			sc.check(t, m)
		})
	}
}

// TestLint runs helm lint --strict for each scenario.
func TestLint(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			args := []string{"lint", "--strict", chartDir, "--namespace", namespace}
			for _, v := range sc.values {
				args = append(args, "-f", "testdata/"+v)
			}
			if out, err := helm(t, args...); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}

// checkCommon asserts what holds for every rendering.
func checkCommon(t *testing.T, m *manifest) {
	t.Helper()
	for _, w := range workloads(m) {
		checkPodSecurity(t, w)
	}
	checkProbes(t, m)
	checkGracePeriods(t, m)
	checkEnvRefs(t, m)
	checkServices(t, m)
	checkCoordinatorPDB(t, m)
	checkEtcdCredentialsOnlyInCoordinator(t, m)
	checkWorkersAdvertisePodIP(t, m)
	checkCoordinatorTarget(t, m)
	checkMounts(t, m)
	checkStateKey(t, m)
	checkNotes(t, m)
}

func checkPodSecurity(t *testing.T, w workload) {
	t.Helper()
	ps := w.Pod.Spec.SecurityContext
	if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.RunAsUser == nil || *ps.RunAsUser == 0 {
		t.Errorf("%s %s: pod is not pinned to a non-root user: %+v", w.Kind, w.Name, ps)
	}
	if w.Pod.Spec.AutomountServiceAccountToken == nil || *w.Pod.Spec.AutomountServiceAccountToken {
		t.Errorf("%s %s: mounts a service account token it does not need", w.Kind, w.Name)
	}
	for _, c := range append(slices.Clone(w.Pod.Spec.InitContainers), w.Pod.Spec.Containers...) {
		sc := c.SecurityContext
		switch {
		case sc == nil:
			t.Errorf("%s %s/%s: no securityContext", w.Kind, w.Name, c.Name)
		case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
			t.Errorf("%s %s/%s: root filesystem is writable", w.Kind, w.Name, c.Name)
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
			t.Errorf("%s %s/%s: privilege escalation allowed", w.Kind, w.Name, c.Name)
		case sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0:
			t.Errorf("%s %s/%s: capabilities not all dropped: %+v", w.Kind, w.Name, c.Name, sc.Capabilities)
		case sc.Privileged != nil && *sc.Privileged:
			t.Errorf("%s %s/%s: privileged", w.Kind, w.Name, c.Name)
		}
		if c.Resources.Requests == nil {
			t.Errorf("%s %s/%s: no resource requests", w.Kind, w.Name, c.Name)
		}
	}
}

// mcpContainers are the containers running mcpcancel, by subcommand.
func mcpContainers(m *manifest, sub string) []corev1.Container {
	var out []corev1.Container
	for _, w := range workloads(m) {
		for _, c := range w.Pod.Spec.Containers {
			if subcommand(c) == sub {
				out = append(out, c)
			}
		}
	}
	return out
}

func containerPort(c corev1.Container, name string) int32 {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

func listenPort(t *testing.T, c corev1.Container, flag string) int32 {
	t.Helper()
	v, ok := flagValue(c.Args, flag)
	if !ok {
		t.Fatalf("%s: no --%s", c.Name, flag)
	}
	var port int32
	if _, err := fmt.Sscanf(v[strings.LastIndex(v, ":")+1:], "%d", &port); err != nil {
		t.Fatalf("%s: --%s=%s: %v", c.Name, flag, v, err)
	}
	return port
}

func checkProbes(t *testing.T, m *manifest) {
	t.Helper()
	gws := mcpContainers(m, "gateway")
	if len(gws) != 1 {
		t.Fatalf("%d gateway containers, want 1", len(gws))
	}
	gw := gws[0]
	httpPort := listenPort(t, gw, "http")
	if containerPort(gw, "http") != httpPort {
		t.Errorf("gateway port http = %d, --http port %d", containerPort(gw, "http"), httpPort)
	}
	for _, p := range []struct {
		probe *corev1.Probe
		path  string
	}{{gw.ReadinessProbe, "/readyz"}, {gw.LivenessProbe, "/healthz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != "http" {
			t.Errorf("gateway: want an HTTP probe of %s on port http, got %+v", p.path, p.probe)
		}
	}
	for _, sub := range []string{"coordinator", "worker"} {
		cs := mcpContainers(m, sub)
		if len(cs) == 0 {
			t.Fatalf("no %s containers", sub)
		}
		for _, c := range cs {
			// /readyz follows the process's grpc.health.v1 from inside it:
			// the kubelet's grpc probes cannot present a client certificate.
			r := c.ReadinessProbe
			if r == nil || r.HTTPGet == nil || r.HTTPGet.Path != "/readyz" || containerPort(c, r.HTTPGet.Port.String()) != listenPort(t, c, "admin") {
				t.Errorf("%s: want a readiness probe of /readyz on the --admin port, got %+v", sub, r)
			}
			l := c.LivenessProbe
			if l == nil || l.HTTPGet == nil || l.HTTPGet.Path != "/healthz" || containerPort(c, l.HTTPGet.Port.String()) != listenPort(t, c, "admin") {
				t.Errorf("%s: want a liveness probe of /healthz on the --admin port, got %+v", sub, l)
			}
		}
	}
}

func duration(t *testing.T, c corev1.Container, flag string) time.Duration {
	t.Helper()
	v, ok := flagValue(c.Args, flag)
	if !ok {
		t.Fatalf("%s: no --%s", c.Name, flag)
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s: --%s=%s: %v", c.Name, flag, v, err)
	}
	return d
}

// checkGracePeriods: the kubelet must not kill a process before its own
// drain ends.
func checkGracePeriods(t *testing.T, m *manifest) {
	t.Helper()
	for _, w := range workloads(m) {
		for _, c := range w.Pod.Spec.Containers {
			var need time.Duration
			switch subcommand(c) {
			case "gateway":
				need = duration(t, c, "shutdown-grace")
				if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
					need += time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
				}
			case "coordinator":
				need = duration(t, c, "shutdown-timeout")
			case "worker":
				need = duration(t, c, "drain-timeout") + 5*time.Second // + the detach
			default:
				continue
			}
			got := w.Pod.Spec.TerminationGracePeriodSeconds
			if got == nil || time.Duration(*got)*time.Second <= need {
				t.Errorf("%s %s: terminationGracePeriodSeconds %v, want more than %v", w.Kind, w.Name, got, need)
			}
		}
	}
}

// checkEnvRefs: Kubernetes expands $(VAR) in args only for VARs the
// container defines.
func checkEnvRefs(t *testing.T, m *manifest) {
	t.Helper()
	for _, w := range workloads(m) {
		for _, c := range w.Pod.Spec.Containers {
			defined := map[string]bool{}
			for _, e := range c.Env {
				defined[e.Name] = true
			}
			for _, a := range append(slices.Clone(c.Command), c.Args...) {
				for rest := a; strings.Contains(rest, "$("); {
					_, after, _ := strings.Cut(rest, "$(")
					name, tail, _ := strings.Cut(after, ")")
					if !defined[name] {
						t.Errorf("%s %s/%s: %q uses $(%s), which the container does not define", w.Kind, w.Name, c.Name, a, name)
					}
					rest = tail
				}
			}
		}
	}
}

// checkServices: every Service selects pods of the chart, on ports they have.
func checkServices(t *testing.T, m *manifest) {
	t.Helper()
	for _, s := range all[*corev1.Service](m) {
		var matched []workload
		for _, w := range workloads(m) {
			if selects(s.Spec.Selector, w.Pod.Labels) {
				matched = append(matched, w)
			}
		}
		if len(matched) == 0 {
			t.Errorf("Service %s selects no pods", s.Name)
			continue
		}
		for _, p := range s.Spec.Ports {
			for _, w := range matched {
				if !podHasPort(w.Pod, p.TargetPort.String()) {
					t.Errorf("Service %s port %s: %s %s has no port %s", s.Name, p.Name, w.Kind, w.Name, p.TargetPort.String())
				}
			}
		}
	}
}

func podHasPort(p *corev1.PodTemplateSpec, port string) bool {
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == port || fmt.Sprint(cp.ContainerPort) == port {
				return true
			}
		}
	}
	return false
}

func checkCoordinatorPDB(t *testing.T, m *manifest) {
	t.Helper()
	d := find[*appsv1.Deployment](t, m, full+"-coordinator")
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 1 {
		t.Fatalf("coordinator replicas %v", d.Spec.Replicas)
	}
	pdb := find[*policyv1.PodDisruptionBudget](t, m, full+"-coordinator")
	if !selects(pdb.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
		t.Errorf("the coordinator PDB does not select the coordinator pods")
	}
	if mu := pdb.Spec.MaxUnavailable; mu == nil || mu.IntValue() < 1 || (*d.Spec.Replicas > 1 && mu.IntValue() >= int(*d.Spec.Replicas)) {
		t.Errorf("coordinator PDB maxUnavailable %v with %d replicas", mu, *d.Spec.Replicas)
	}
	spread := d.Spec.Template.Spec.TopologySpreadConstraints
	if !slices.ContainsFunc(spread, func(c corev1.TopologySpreadConstraint) bool {
		return c.TopologyKey == "kubernetes.io/hostname" && c.LabelSelector != nil && selects(c.LabelSelector.MatchLabels, d.Spec.Template.Labels)
	}) {
		t.Errorf("coordinator pods are not spread across nodes: %+v", spread)
	}
}

// etcdSecrets are the Secrets holding etcd credentials in the values used.
func etcdSecrets() []string {
	return []string{"mcpcancel-etcd-client", "mcpcancel-etcd-password"}
}

// checkEtcdCredentialsOnlyInCoordinator: only coordinator pods mount etcd
// credentials or talk etcd.
func checkEtcdCredentialsOnlyInCoordinator(t *testing.T, m *manifest) {
	t.Helper()
	for _, w := range workloads(m) {
		if component(w.Pod) == "coordinator" {
			continue
		}
		for _, v := range w.Pod.Spec.Volumes {
			if v.Secret != nil && slices.Contains(etcdSecrets(), v.Secret.SecretName) {
				t.Errorf("%s %s mounts the etcd Secret %s", w.Kind, w.Name, v.Secret.SecretName)
			}
		}
		for _, c := range w.Pod.Spec.Containers {
			for _, a := range c.Args {
				if strings.HasPrefix(a, "--etcd") && subcommand(c) != "" {
					t.Errorf("%s %s/%s gets etcd flag %s", w.Kind, w.Name, c.Name, a)
				}
			}
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && slices.Contains(etcdSecrets(), e.ValueFrom.SecretKeyRef.Name) {
					t.Errorf("%s %s/%s reads etcd Secret %s", w.Kind, w.Name, c.Name, e.ValueFrom.SecretKeyRef.Name)
				}
			}
		}
	}
}

// checkWorkersAdvertisePodIP: each worker advertises $(POD_IP):PORT, with
// POD_IP from the downward API's status.podIP and PORT its grpc port.
func checkWorkersAdvertisePodIP(t *testing.T, m *manifest) {
	t.Helper()
	for _, c := range mcpContainers(m, "worker") {
		adv, _ := flagValue(c.Args, "advertise")
		want := fmt.Sprintf("$(POD_IP):%d", containerPort(c, "grpc"))
		if adv != want {
			t.Errorf("worker --advertise=%q, want %q", adv, want)
		}
		i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "POD_IP" })
		if i < 0 || c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.FieldRef == nil || c.Env[i].ValueFrom.FieldRef.FieldPath != "status.podIP" {
			t.Errorf("worker: POD_IP is not the downward API's status.podIP: %+v", c.Env)
		}
	}
}

// checkCoordinatorTarget: gateways and workers dial every coordinator
// replica through the headless Service.
func checkCoordinatorTarget(t *testing.T, m *manifest) {
	t.Helper()
	svc := find[*corev1.Service](t, m, full+"-coordinator-headless")
	co := find[*appsv1.Deployment](t, m, full+"-coordinator")
	if svc.Spec.ClusterIP != "None" || !selects(svc.Spec.Selector, co.Spec.Template.Labels) {
		t.Errorf("the headless coordinator Service is not headless or does not select the coordinators")
	}
	want := fmt.Sprintf("dns:///%s.%s.svc:%d", svc.Name, namespace, svc.Spec.Ports[0].Port)
	for _, sub := range []string{"gateway", "worker"} {
		for _, c := range mcpContainers(m, sub) {
			if got, _ := flagValue(c.Args, "coordinator"); got != want {
				t.Errorf("%s --coordinator=%q, want %q", sub, got, want)
			}
		}
	}
}

func checkDefault(t *testing.T, m *manifest) {
	co := find[*appsv1.Deployment](t, m, full+"-coordinator")
	if *co.Spec.Replicas != 3 {
		t.Errorf("coordinator replicas %d, want 3 by default", *co.Spec.Replicas)
	}
	if len(all[*appsv1.StatefulSet](m)) != 0 || len(all[*networkingv1.NetworkPolicy](m)) != 0 ||
		len(all[*autoscalingv2.HorizontalPodAutoscaler](m)) != 0 || len(all[*networkingv1.Ingress](m)) != 0 ||
		len(all[*serviceMonitor](m)) != 0 || len(all[*certificate](m)) != 0 {
		t.Errorf("optional objects rendered by default")
	}
	c := mcpContainers(m, "coordinator")[0]
	if got, _ := flagValue(c.Args, "etcd"); got != "http://etcd:2379" {
		t.Errorf("--etcd=%q by default", got)
	}
	for _, sub := range []string{"gateway", "coordinator", "worker"} {
		for _, c := range mcpContainers(m, sub) {
			if _, ok := flagValue(c.Args, "tls-cert"); ok {
				t.Errorf("%s has --tls-cert with tls off", sub)
			}
		}
	}
}

func checkExternalEtcd(t *testing.T, m *manifest) {
	co := find[*appsv1.Deployment](t, m, full+"-coordinator")
	c := co.Spec.Template.Spec.Containers[0]
	if got, _ := flagValue(c.Args, "etcd"); got != "https://etcd-0.etcd.db.svc:2379,https://etcd-1.etcd.db.svc:2379,https://etcd-2.etcd.db.svc:2379" {
		t.Errorf("--etcd=%q", got)
	}
	mounted := map[string]string{} // path -> secret
	vols := map[string]string{}
	for _, v := range co.Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			vols[v.Name] = v.Secret.SecretName
		}
	}
	for _, vm := range c.VolumeMounts {
		mounted[vm.MountPath] = vols[vm.Name]
	}
	for flag, secret := range map[string]string{
		"etcd-cert": "mcpcancel-etcd-client", "etcd-key": "mcpcancel-etcd-client", "etcd-ca": "mcpcancel-etcd-client",
		"etcd-password-file": "mcpcancel-etcd-password",
	} {
		v, ok := flagValue(c.Args, flag)
		dir := v[:max(strings.LastIndex(v, "/"), 0)]
		if !ok || mounted[dir] != secret {
			t.Errorf("--%s=%q is not in a mount of Secret %s (mounts %v)", flag, v, secret, mounted)
		}
	}
	if u, _ := flagValue(c.Args, "etcd-username"); u != "mcpcancel" {
		t.Errorf("--etcd-username=%q", u)
	}
}

func checkEmbeddedEtcd(t *testing.T, m *manifest) {
	ss := find[*appsv1.StatefulSet](t, m, full+"-etcd")
	if ss.Spec.Replicas == nil || *ss.Spec.Replicas != 3 {
		t.Errorf("etcd members %v, want 3", ss.Spec.Replicas)
	}
	if len(ss.Spec.VolumeClaimTemplates) != 1 || ss.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests.Storage().IsZero() {
		t.Errorf("etcd members have no persistent volumes")
	}
	c := ss.Spec.Template.Spec.Containers[0]
	if !strings.Contains(c.Image, "/etcd-development/etcd:v3.") {
		t.Errorf("etcd image %q is not the official one", c.Image)
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool {
		return vm.Name == ss.Spec.VolumeClaimTemplates[0].Name
	}) {
		t.Errorf("the etcd data volume is not mounted")
	}
	svc := find[*corev1.Service](t, m, ss.Spec.ServiceName)
	if svc.Spec.ClusterIP != "None" || !svc.Spec.PublishNotReadyAddresses {
		t.Errorf("etcd's Service must be headless and publish unready members (bootstrap)")
	}
	co := mcpContainers(m, "coordinator")[0]
	got, _ := flagValue(co.Args, "etcd")
	var want []string
	for i := range 3 {
		want = append(want, fmt.Sprintf("http://%s-%d.%s.%s.svc:2379", ss.Name, i, svc.Name, namespace))
	}
	if got != strings.Join(want, ",") {
		t.Errorf("coordinator --etcd=%q, want %q", got, strings.Join(want, ","))
	}
	initial, _ := flagValue(c.Args, "initial-cluster")
	if strings.Count(initial, "=http://") != 3 {
		t.Errorf("--initial-cluster=%q does not name 3 members", initial)
	}
	pdb := find[*policyv1.PodDisruptionBudget](t, m, full+"-etcd")
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 2 {
		t.Errorf("etcd PDB minAvailable %v, want a quorum of 2", pdb.Spec.MinAvailable)
	}
}

func checkTwoFleets(t *testing.T, m *manifest) {
	demo := find[*appsv1.Deployment](t, m, full+"-worker-demo")
	up := find[*appsv1.Deployment](t, m, full+"-worker-everything")
	if selects(demo.Spec.Selector.MatchLabels, up.Spec.Template.Labels) || selects(up.Spec.Selector.MatchLabels, demo.Spec.Template.Labels) {
		t.Errorf("the fleets' selectors overlap")
	}
	dc, uc := demo.Spec.Template.Spec.Containers[0], up.Spec.Template.Spec.Containers[0]
	if _, ok := flagValue(dc.Args, "demo"); !ok {
		t.Errorf("demo fleet without --demo: %v", dc.Args)
	}
	if v, _ := flagValue(uc.Args, "upstream-stdio"); v != "npx -y @modelcontextprotocol/server-everything@2026.8.31" {
		t.Errorf("upstream fleet --upstream-stdio=%q", v)
	}
	if _, ok := flagValue(uc.Args, "demo"); ok {
		t.Errorf("upstream fleet serves the demo tools too")
	}
	if uc.Image != "mcpcancel-node:0.1.0" || !strings.HasPrefix(dc.Image, "mcpcancel:") {
		t.Errorf("images: demo %q, upstream %q", dc.Image, uc.Image)
	}
	if *up.Spec.Replicas != 3 || *demo.Spec.Replicas != 2 {
		t.Errorf("replicas: demo %d, upstream %d", *demo.Spec.Replicas, *up.Spec.Replicas)
	}
	if *up.Spec.Template.Spec.TerminationGracePeriodSeconds <= 120 {
		t.Errorf("upstream fleet grace %d with a 120s drain", *up.Spec.Template.Spec.TerminationGracePeriodSeconds)
	}
	if v, _ := flagValue(uc.Args, "capacity"); v != "16" {
		t.Errorf("upstream --capacity=%q", v)
	}
	if v, _ := flagValue(uc.Args, "max-concurrency"); v != "8" {
		t.Errorf("upstream --max-concurrency=%q", v)
	}
	checkUpstreamConfig(t, m, up, `{"deny":["get-env"],"tools":{"*":{"timeout":"5m"},"echo":{"idempotent":true,"timeout":"10s"}}}`)
	if slices.ContainsFunc(dc.Args, func(a string) bool { return strings.HasPrefix(a, "--upstream") }) {
		t.Errorf("demo fleet gets upstream flags: %v", dc.Args)
	}
}

// tlsSecretOf is the Secret mounted at /etc/mcpcancel/tls in c's pod.
func tlsSecretOf(t *testing.T, w workload, c corev1.Container) string {
	t.Helper()
	for _, vm := range c.VolumeMounts {
		if vm.MountPath != "/etc/mcpcancel/tls" {
			continue
		}
		for _, v := range w.Pod.Spec.Volumes {
			if v.Name == vm.Name && v.Secret != nil {
				return v.Secret.SecretName
			}
		}
	}
	return ""
}

// checkMTLS: every mcpcancel process has its role's certificate and the
// --tls-* flags pointing into it; returns the Secret of each role.
func checkMTLS(t *testing.T, m *manifest) map[string]string {
	t.Helper()
	secrets := map[string]string{}
	for _, w := range workloads(m) {
		for _, c := range w.Pod.Spec.Containers {
			role := subcommand(c)
			if role == "" {
				continue
			}
			for flag, file := range map[string]string{"tls-cert": "tls.crt", "tls-key": "tls.key", "tls-ca": "ca.crt"} {
				if v, _ := flagValue(c.Args, flag); v != "/etc/mcpcancel/tls/"+file {
					t.Errorf("%s: --%s=%q", w.Name, flag, v)
				}
			}
			s := tlsSecretOf(t, w, c)
			if s == "" {
				t.Errorf("%s: no certificate Secret mounted", w.Name)
			}
			if prev, ok := secrets[role]; ok && prev != s {
				t.Errorf("role %s uses Secrets %s and %s", role, prev, s)
			}
			secrets[role] = s
		}
	}
	if len(secrets) != 3 || secrets["gateway"] == secrets["worker"] || secrets["gateway"] == secrets["coordinator"] || secrets["worker"] == secrets["coordinator"] {
		t.Errorf("each role needs its own certificate (its OU is the role): %v", secrets)
	}
	return secrets
}

func checkMTLSSecrets(t *testing.T, m *manifest) {
	got := checkMTLS(t, m)
	for role, s := range got {
		if s != "mcpcancel-"+role+"-tls" {
			t.Errorf("%s mounts %s", role, s)
		}
	}
	if len(all[*certificate](m)) != 0 {
		t.Errorf("Certificates rendered without cert-manager")
	}
	if n := len(all[*corev1.Secret](m)) + len(all[*corev1.ConfigMap](m)); n != 0 {
		t.Errorf("%d Secrets and ConfigMaps rendered although each is named", n)
	}
	gw := find[*appsv1.Deployment](t, m, full+"-gateway").Spec.Template.Spec
	for _, want := range []string{"mcpcancel-gateway-state-key", "mcpcancel-auth-policy"} {
		if !slices.ContainsFunc(gw.Volumes, func(v corev1.Volume) bool {
			return (v.Secret != nil && v.Secret.SecretName == want) || (v.ConfigMap != nil && v.ConfigMap.Name == want)
		}) {
			t.Errorf("the gateway pods do not mount %s: %+v", want, gw.Volumes)
		}
	}
}

func checkEverything(t *testing.T, m *manifest) {
	gw := find[*appsv1.Deployment](t, m, full+"-gateway")
	if gw.Spec.Replicas != nil {
		t.Errorf("gateway replicas set although the HPA owns them")
	}
	hpa := find[*autoscalingv2.HorizontalPodAutoscaler](t, m, full+"-gateway")
	if hpa.Spec.ScaleTargetRef.Kind != "Deployment" || hpa.Spec.ScaleTargetRef.Name != gw.Name || hpa.Spec.MaxReplicas != 8 {
		t.Errorf("HPA %+v", hpa.Spec)
	}
	ing := find[*networkingv1.Ingress](t, m, full+"-gateway")
	b := ing.Spec.Rules[0].HTTP.Paths[0].Backend.Service
	svc := find[*corev1.Service](t, m, b.Name)
	if !selects(svc.Spec.Selector, gw.Spec.Template.Labels) || b.Port.Name != "http" || len(ing.Spec.TLS) != 1 {
		t.Errorf("Ingress does not route to the gateway: %+v", ing.Spec)
	}
	checkServiceMonitors(t, m)
	checkNetworkPolicies(t, m)
	secrets := checkMTLS(t, m)
	certs := all[*certificate](m)
	for role, s := range secrets {
		i := slices.IndexFunc(certs, func(c *certificate) bool { return c.Spec.SecretName == s })
		if i < 0 {
			t.Errorf("no Certificate issues %s's Secret %s", role, s)
			continue
		}
		c := certs[i]
		if !slices.Equal(c.Spec.Subject.OrganizationalUnits, []string{role}) || c.Spec.IssuerRef.Name != "mcpcancel-ca" ||
			!slices.Contains(c.Spec.Usages, "client auth") || !slices.Contains(c.Spec.Usages, "server auth") {
			t.Errorf("Certificate for %s: %+v", role, c.Spec)
		}
	}
	coCert := certs[slices.IndexFunc(certs, func(c *certificate) bool { return c.Spec.SecretName == secrets["coordinator"] })]
	if !slices.Contains(coCert.Spec.DNSNames, fmt.Sprintf("%s-coordinator-headless.%s.svc", full, namespace)) {
		t.Errorf("the coordinator certificate does not name the address clients dial: %v", coCert.Spec.DNSNames)
	}
	rc := find[*appsv1.Deployment](t, m, full+"-worker-remote").Spec.Template.Spec.Containers[0]
	if v, _ := flagValue(rc.Args, "upstream-http"); v != "http://mcp-server.tools.svc:8080/mcp" {
		t.Errorf("remote fleet --upstream-http=%q", v)
	}
	for _, role := range []string{"admin", "operator"} { // for audit/call/tools, and cancel/console
		i := slices.IndexFunc(certs, func(c *certificate) bool { return slices.Equal(c.Spec.Subject.OrganizationalUnits, []string{role}) })
		if i < 0 || certs[i].Spec.SecretName != full+"-"+role+"-tls" {
			t.Errorf("no %s certificate in Secret %s-%s-tls", role, full, role)
		}
	}
	gc := gw.Spec.Template.Spec.Containers[0]
	for _, f := range []string{"tokens-file", "jwks-file", "jwt-issuer", "jwt-audience", "public-url", "auth-policy", "allowed-origins"} {
		if _, ok := flagValue(gc.Args, f); !ok {
			t.Errorf("gateway without --%s", f)
		}
	}
	policy := find[*corev1.ConfigMap](t, m, full+"-gateway-auth-policy").Data["policy.json"]
	if policy != `{"principals":{"*":{"deny":["danger-*"]}},"required":["mcp"],"tools":{"deploy-*":["tools:deploy"]}}` {
		t.Errorf("auth policy ConfigMap holds %s", policy)
	}
	if gw.Spec.Template.Annotations["mcpcancel.io/auth-policy-sha256"] == "" {
		t.Errorf("gateway pods do not roll when the auth policy changes")
	}
	if !slices.ContainsFunc(gc.VolumeMounts, func(vm corev1.VolumeMount) bool { return vm.MountPath == "/etc/ssl/corporate" }) {
		t.Errorf("gateway.extraVolumeMounts not rendered: %+v", gc.VolumeMounts)
	}
	if v, _ := flagValue(mcpContainers(m, "coordinator")[0].Args, "audit-export"); v != "-" {
		t.Errorf("--audit-export=%q", v)
	}
	co := find[*appsv1.Deployment](t, m, full+"-coordinator")
	up := find[*appsv1.Deployment](t, m, full+"-worker-everything")
	if gw.Spec.Template.Spec.NodeSelector["kubernetes.io/os"] != "linux" || len(co.Spec.Template.Spec.Tolerations) != 1 ||
		up.Spec.Template.Spec.Affinity == nil || up.Spec.Template.Spec.Affinity.NodeAffinity == nil {
		t.Errorf("scheduling values not rendered: gateway nodeSelector %v, coordinator tolerations %v, fleet affinity %v",
			gw.Spec.Template.Spec.NodeSelector, co.Spec.Template.Spec.Tolerations, up.Spec.Template.Spec.Affinity)
	}
}

func checkServiceMonitors(t *testing.T, m *manifest) {
	t.Helper()
	sms := all[*serviceMonitor](m)
	if len(sms) != 3 {
		t.Fatalf("%d ServiceMonitors, want gateway, coordinator and worker", len(sms))
	}
	for _, sm := range sms {
		if sm.Metadata.Labels["release"] != "prometheus" {
			t.Errorf("ServiceMonitor %s lacks serviceMonitor.labels", sm.Metadata.Name)
		}
		scraped := 0
		for _, s := range all[*corev1.Service](m) {
			if !selects(sm.Spec.Selector.MatchLabels, s.Labels) {
				continue
			}
			for _, p := range s.Spec.Ports {
				if p.Name == sm.Spec.Endpoints[0].Port {
					scraped++
				}
			}
		}
		if scraped == 0 {
			t.Errorf("ServiceMonitor %s scrapes no Service port %q", sm.Metadata.Name, sm.Spec.Endpoints[0].Port)
		}
	}
}

// checkNetworkPolicies: only gateways reach workers' Execute port; only
// coordinators reach etcd's client port.
func checkNetworkPolicies(t *testing.T, m *manifest) {
	t.Helper()
	pods := map[string]*corev1.PodTemplateSpec{}
	for _, w := range workloads(m) {
		pods[component(w.Pod)] = w.Pod
	}
	only := func(policy, port, from string) {
		np := find[*networkingv1.NetworkPolicy](t, m, full+"-"+policy)
		if !selects(np.Spec.PodSelector.MatchLabels, pods[policy].Labels) {
			t.Errorf("NetworkPolicy %s does not select its pods", np.Name)
		}
		for _, r := range np.Spec.Ingress {
			if !slices.ContainsFunc(r.Ports, func(p networkingv1.NetworkPolicyPort) bool { return p.Port != nil && p.Port.String() == port }) {
				continue
			}
			if len(r.From) != 1 || r.From[0].PodSelector == nil || r.From[0].NamespaceSelector != nil ||
				!selects(r.From[0].PodSelector.MatchLabels, pods[from].Labels) {
				t.Errorf("NetworkPolicy %s lets more than %s pods reach port %s: %+v", np.Name, from, port, r.From)
			}
			for c, p := range pods {
				if c != from && selects(r.From[0].PodSelector.MatchLabels, p.Labels) {
					t.Errorf("NetworkPolicy %s lets %s pods reach port %s", np.Name, c, port)
				}
			}
			return
		}
		t.Errorf("NetworkPolicy %s has no rule for port %s", np.Name, port)
	}
	only("worker", "grpc", "gateway")
	only("etcd", "client", "coordinator")
}

// checkNotes: NOTES.txt tells how to reach the gateway, warns when nobody
// is authenticated (and only then), and warns when the coordinators dial
// the chart's default etcd address (and only then).
func checkNotes(t *testing.T, m *manifest) {
	t.Helper()
	gw := mcpContainers(m, "gateway")[0]
	ing := all[*networkingv1.Ingress](m)
	var want string
	if len(ing) > 0 {
		scheme := "http://"
		if len(ing[0].Spec.TLS) > 0 {
			scheme = "https://"
		}
		want = scheme + ing[0].Spec.Rules[0].Host + ing[0].Spec.Rules[0].HTTP.Paths[0].Path
	} else {
		svc := find[*corev1.Service](t, m, full+"-gateway")
		want = fmt.Sprintf("port-forward svc/%s 7800:%d", svc.Name, svc.Spec.Ports[0].Port)
	}
	if !strings.Contains(m.NOTES, want) {
		t.Errorf("NOTES.txt does not say %q:\n%s", want, m.NOTES)
	}
	authn := slices.ContainsFunc([]string{"tokens-file", "jwks-file", "jwt-issuer"}, func(f string) bool {
		return hasSetting(gw, f)
	})
	if warned := strings.Contains(m.NOTES, "no client authentication"); warned == authn {
		t.Errorf("NOTES.txt warns about authentication: %v, with authentication configured: %v (args %v)", warned, authn, gw.Args)
	}
	etcd, _ := flagValue(mcpContainers(m, "coordinator")[0].Args, "etcd")
	if warned := strings.Contains(m.NOTES, "WARNING: etcd"); warned != (etcd == "http://etcd:2379") {
		t.Errorf("NOTES.txt warns about the default etcd address: %v, with --etcd=%s:\n%s", warned, etcd, m.NOTES)
	}
}

// hasSetting: c sets flag, by an argument or by its MCPCANCEL_ variable.
func hasSetting(c corev1.Container, flag string) bool {
	if _, ok := flagValue(c.Args, flag); ok {
		return true
	}
	env := "MCPCANCEL_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
	return slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == env })
}

// checkUpstreamConfig: the fleet's --upstream-config names a file in a
// mounted ConfigMap holding want, and the pods roll when it changes.
func checkUpstreamConfig(t *testing.T, m *manifest, d *appsv1.Deployment, want string) {
	t.Helper()
	c := d.Spec.Template.Spec.Containers[0]
	path, _ := flagValue(c.Args, "upstream-config")
	dir, file := path[:max(strings.LastIndex(path, "/"), 0)], path[strings.LastIndex(path, "/")+1:]
	var cm string
	for _, vm := range c.VolumeMounts {
		for _, v := range d.Spec.Template.Spec.Volumes {
			if vm.MountPath == dir && v.Name == vm.Name && v.ConfigMap != nil {
				cm = v.ConfigMap.Name
			}
		}
	}
	if cm == "" {
		t.Fatalf("--upstream-config=%q is not in a mounted ConfigMap", path)
	}
	if got := find[*corev1.ConfigMap](t, m, cm).Data[file]; got != want {
		t.Errorf("ConfigMap %s %s = %s, want %s", cm, file, got, want)
	}
	if d.Spec.Template.Annotations["mcpcancel.io/upstream-config-sha256"] == "" {
		t.Errorf("pods do not roll when the upstream config changes")
	}
}
