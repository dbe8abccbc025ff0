package kubernetes

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/outbox-relay/outbox-relay/internal/pipeconf"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// manifests is deploy/kubernetes, from this directory: the tests read the manifests (and the
// files relay.yaml names) by the paths kustomization.yaml uses, relative to it.
const manifests = "../../../deploy/kubernetes"

func TestMain(m *testing.M) {
	if err := os.Chdir(manifests); err != nil {
		fmt.Fprintf(os.Stderr, "the manifests: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	relaytest.RemoveRelayBinary()
	os.Exit(code)
}

// kustomization is the part of kustomize's Kustomization these manifests use; decoded strictly
// like the rest, so a misspelt key is an error here too.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
	} `json:"images"`
}

// objects are the decoded manifests, by kind and name.
type objects struct {
	configMaps   map[string]*corev1.ConfigMap
	secrets      map[string]*corev1.Secret
	services     map[string]*corev1.Service
	statefulSets map[string]*appsv1.StatefulSet
	pdbs         map[string]*policyv1.PodDisruptionBudget
	monitors     map[string]*monitoringv1.ServiceMonitor
}

// decode strictly decodes one manifest into the API type of its apiVersion and kind.
func (o *objects) decode(doc []byte) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return err
	}
	strict := func(into any) error { return yaml.UnmarshalStrict(doc, into) }
	switch gvk := tm.APIVersion + " " + tm.Kind; gvk {
	case "v1 ConfigMap":
		return add(o.configMaps, strict, func(v *corev1.ConfigMap) string { return v.Name })
	case "v1 Secret":
		return add(o.secrets, strict, func(v *corev1.Secret) string { return v.Name })
	case "v1 Service":
		return add(o.services, strict, func(v *corev1.Service) string { return v.Name })
	case "apps/v1 StatefulSet":
		return add(o.statefulSets, strict, func(v *appsv1.StatefulSet) string { return v.Name })
	case "policy/v1 PodDisruptionBudget":
		return add(o.pdbs, strict, func(v *policyv1.PodDisruptionBudget) string { return v.Name })
	case "monitoring.coreos.com/v1 ServiceMonitor":
		return add(o.monitors, strict, func(v *monitoringv1.ServiceMonitor) string { return v.Name })
	default:
		return fmt.Errorf("unexpected apiVersion and kind %q: add its API type to this test", gvk)
	}
}

func add[T any](m map[string]*T, strict func(any) error, name func(*T) string) error {
	v := new(T)
	if err := strict(v); err != nil {
		return err
	}
	if name(v) == "" {
		return fmt.Errorf("no metadata.name")
	}
	m[name(v)] = v
	return nil
}

func load(t *testing.T) (*objects, kustomization) {
	t.Helper()
	var k kustomization
	b, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	o := &objects{configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{},
		services: map[string]*corev1.Service{}, statefulSets: map[string]*appsv1.StatefulSet{},
		pdbs: map[string]*policyv1.PodDisruptionBudget{}, monitors: map[string]*monitoringv1.ServiceMonitor{}}
	listed := map[string]bool{"kustomization.yaml": true}
	for _, r := range k.Resources {
		listed[r] = true
		b, err := os.ReadFile(r)
		if err != nil {
			t.Fatalf("kustomization.yaml lists %s: %v", r, err)
		}
		for i, doc := range bytes.Split(b, []byte("\n---")) {
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			if err := o.decode(doc); err != nil {
				t.Fatalf("%s (document %d): %v", r, i+1, err)
			}
		}
	}
	files, _ := filepath.Glob("*.yaml")
	for _, f := range files {
		if !listed[f] {
			t.Errorf("%s is not in kustomization.yaml's resources", f)
		}
	}
	return o, k
}

// The decoder is strict: an unknown field (a typo) is an error, so a pass means something.
func TestStrictDecodingRefusesUnknownFields(t *testing.T) {
	b, err := os.ReadFile("pdb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	o, _ := load(t)
	if err := o.decode(b); err != nil {
		t.Fatalf("pdb.yaml as written: %v", err)
	}
	bad := bytes.Replace(b, []byte("maxUnavailable: 1"), []byte("maxUnavailable: 1\n  maxUnavailible: 2"), 1)
	if err := o.decode(bad); err == nil || !strings.Contains(err.Error(), "maxUnavailible") {
		t.Fatalf("a misspelt field decoded without error (%v)", err)
	}
}

// Every manifest decodes strictly into its API type, and the objects fit together: selectors
// match pod labels, volumes and envFrom name objects that exist, probes use /healthz and /readyz
// on the metrics port, the shard StatefulSet passes --shard from the pod-index label and has one
// pod per shard of the ConfigMap's pipelines file, which parses with the variables the pods get.
func TestManifestsAreValidAndWired(t *testing.T) {
	o, _ := load(t)
	shards, ok := o.statefulSets["outbox-relay-shard"]
	if !ok {
		t.Fatal("no StatefulSet outbox-relay-shard")
	}
	if _, ok := o.statefulSets["outbox-relay-standby"]; !ok {
		t.Fatal("no StatefulSet outbox-relay-standby")
	}
	for name, ss := range o.statefulSets {
		t.Run(name, func(t *testing.T) { checkStatefulSet(t, o, ss) })
	}
	c := shards.Spec.Template.Spec.Containers[0]
	if !hasArg(c.Args, "--shard=$(POD_INDEX)") {
		t.Errorf("the shard StatefulSet does not pass --shard=$(POD_INDEX): %v", c.Args)
	}
	if e := envVar(c, "POD_INDEX"); e == nil || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil ||
		e.ValueFrom.FieldRef.FieldPath != "metadata.labels['apps.kubernetes.io/pod-index']" {
		t.Errorf("POD_INDEX is not the pod-index label: %+v", e)
	}
	if c := o.statefulSets["outbox-relay-standby"].Spec.Template.Spec.Containers[0]; hasArgPrefix(c.Args, "--shard") {
		t.Errorf("standbys must run every shard (no --shard): %v", c.Args)
	}
	file := pipelinesFile(t, o, shards)
	n := 0
	for _, p := range file.Pipelines {
		n = max(n, p.Shards)
	}
	if r := shards.Spec.Replicas; r == nil || int(*r) != n {
		t.Errorf("outbox-relay-shard's replicas (%s) and the pipelines file's shards (%d) must be equal", fmtReplicas(r), n)
	}
	checkPDBAndMonitoring(t, o, shards)
}

func checkStatefulSet(t *testing.T, o *objects, ss *appsv1.StatefulSet) {
	sel, err := metav1.LabelSelectorAsSelector(ss.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(ss.Spec.Template.Labels)) {
		t.Errorf("selector %v does not match the pod labels %v (%v)", ss.Spec.Selector, ss.Spec.Template.Labels, err)
	}
	if _, ok := o.services[ss.Spec.ServiceName]; !ok {
		t.Errorf("serviceName %q: no such Service", ss.Spec.ServiceName)
	}
	pod := ss.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	for _, ef := range c.EnvFrom {
		if ef.SecretRef != nil && o.secrets[ef.SecretRef.Name] == nil {
			t.Errorf("envFrom names Secret %q, which is not here", ef.SecretRef.Name)
		}
	}
	for _, v := range pod.Volumes {
		if v.ConfigMap != nil && o.configMaps[v.ConfigMap.Name] == nil {
			t.Errorf("volume %s names ConfigMap %q, which is not here", v.Name, v.ConfigMap.Name)
		}
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("liveness probe is not GET /healthz: %+v", c.LivenessProbe)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil {
		t.Errorf("no HTTP readiness probe")
	} else if p := c.ReadinessProbe.HTTPGet.Path; p != "/readyz" && p != "/healthz" {
		t.Errorf("readiness probe path %q", p)
	}
	for _, pr := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
		if pr != nil && pr.HTTPGet != nil && (pr.HTTPGet.Port.StrVal != "metrics" || len(c.Ports) == 0 || c.Ports[0].Name != "metrics") {
			t.Errorf("probe port %v is not the container's metrics port %v", pr.HTTPGet.Port, c.Ports)
		}
	}
	if !hasArg(c.Args, "--metrics-addr=:9187") || c.Ports[0].ContainerPort != 9187 {
		t.Errorf("the metrics port and --metrics-addr disagree: %v, %v", c.Args, c.Ports)
	}
	checkFlags(t, c.Args)
}

func checkPDBAndMonitoring(t *testing.T, o *objects, shards *appsv1.StatefulSet) {
	pdb := o.pdbs["outbox-relay-shard"]
	if pdb == nil {
		t.Fatal("no PodDisruptionBudget outbox-relay-shard")
	}
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(shards.Spec.Template.Labels)) {
		t.Errorf("the PodDisruptionBudget does not select the shard pods (%v)", err)
	}
	svc := o.services["outbox-relay"]
	for name, ss := range o.statefulSets {
		if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(ss.Spec.Template.Labels)) {
			t.Errorf("Service outbox-relay does not select the pods of %s", name)
		}
	}
	for name, m := range o.monitors {
		sel, err := metav1.LabelSelectorAsSelector(&m.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(svc.Labels)) {
			t.Errorf("ServiceMonitor %s does not select Service outbox-relay (%v)", name, err)
		}
		for _, ep := range m.Spec.Endpoints {
			if ep.Port != svc.Spec.Ports[0].Name || ep.Path != "/metrics" {
				t.Errorf("ServiceMonitor %s endpoint %+v is not the Service's metrics port and /metrics", name, ep)
			}
		}
	}
}

// pipelinesFile parses the ConfigMap's relay.yaml as `run --config` would, with the variables
// the pods get from the Secret (an unset one is an error).
func pipelinesFile(t *testing.T, o *objects, ss *appsv1.StatefulSet) pipeconf.File {
	t.Helper()
	cm := o.configMaps[ss.Spec.Template.Spec.Volumes[0].ConfigMap.Name]
	sec := o.secrets[ss.Spec.Template.Spec.Containers[0].EnvFrom[0].SecretRef.Name]
	env := func(name string) (string, bool) { v, ok := sec.StringData[name]; return v, ok }
	f, err := pipeconf.Parse([]byte(cm.Data["relay.yaml"]), env, os.ReadFile)
	if err != nil {
		t.Fatalf("relay.yaml in ConfigMap %s: %v", cm.Name, err)
	}
	if _, ok := sec.StringData["DB_DSN"]; !ok && f.DSN == "" {
		t.Error("no database: neither DB_DSN in the Secret nor dsn in relay.yaml")
	}
	return f
}

// checkFlags runs the relay binary with the manifest's arguments (the pod index as 0) and
// --help: cobra refuses an unknown flag or a malformed value before it prints the help.
func checkFlags(t *testing.T, args []string) {
	t.Helper()
	binPath := relaytest.RelayBinary(t)
	run := func(args []string) ([]byte, error) {
		var a []string
		for _, s := range args {
			a = append(a, strings.ReplaceAll(s, "$(POD_INDEX)", "0"))
		}
		return exec.Command(binPath, append(a, "--help")...).CombinedOutput()
	}
	if out, err := run(args); err != nil {
		t.Errorf("outbox-relay %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	// Positive control: an unknown flag is refused the same way.
	if out, err := run(append(args, "--no-such-flag=1")); err == nil {
		t.Errorf("an unknown flag was accepted, so this check proves nothing:\n%s", out)
	}
}

func hasArg(args []string, want string) bool {
	for _, a := range args {
		if a == want {
			return true
		}
	}
	return false
}

func hasArgPrefix(args []string, prefix string) bool {
	for _, a := range args {
		if strings.HasPrefix(a, prefix) {
			return true
		}
	}
	return false
}

func envVar(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

func fmtReplicas(r *int32) string {
	if r == nil {
		return "unset"
	}
	return fmt.Sprint(*r)
}
