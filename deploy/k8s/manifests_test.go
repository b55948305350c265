package k8s

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/internal/bus"
)

// doc is one YAML document of a manifest file.
type doc struct {
	file  string
	index int // 0-based within the file
	raw   []byte
	obj   any
}

func (d doc) String() string { return fmt.Sprintf("%s#%d", d.file, d.index) }

// kinds maps apiVersion/kind to a new value of the type it decodes into.
var kinds = map[string]func() any{
	"v1/Namespace":                                      func() any { return new(corev1.Namespace) },
	"v1/ConfigMap":                                      func() any { return new(corev1.ConfigMap) },
	"v1/Secret":                                         func() any { return new(corev1.Secret) },
	"v1/Service":                                        func() any { return new(corev1.Service) },
	"apps/v1/Deployment":                                func() any { return new(appsv1.Deployment) },
	"apps/v1/StatefulSet":                               func() any { return new(appsv1.StatefulSet) },
	"autoscaling/v2/HorizontalPodAutoscaler":            func() any { return new(autoscalingv2.HorizontalPodAutoscaler) },
	"policy/v1/PodDisruptionBudget":                     func() any { return new(policyv1.PodDisruptionBudget) },
	"networking.k8s.io/v1/NetworkPolicy":                func() any { return new(networkingv1.NetworkPolicy) },
	"kafka.strimzi.io/v1/Kafka":                         func() any { return new(Kafka) },
	"kafka.strimzi.io/v1/KafkaNodePool":                 func() any { return new(KafkaNodePool) },
	"kafka.strimzi.io/v1/KafkaTopic":                    func() any { return new(KafkaTopic) },
	"kafka.strimzi.io/v1/KafkaUser":                     func() any { return new(KafkaUser) },
	"clickhouse.altinity.com/v1/ClickHouseInstallation": func() any { return new(ClickHouseInstallation) },
}

// decode decodes one document strictly into its kind's type, as the API
// server does: an unknown or duplicate field, a field in the wrong case
// (encoding/json would match "stringdata" to stringData), a value of the
// wrong type or outside its enum, or an unknown kind is an error.
func decode(raw []byte) (any, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(raw, &tm); err != nil {
		return nil, fmt.Errorf("type meta: %w", err)
	}
	mk, ok := kinds[tm.APIVersion+"/"+tm.Kind]
	if !ok {
		return nil, fmt.Errorf("unknown kind %s/%s (add its type to kinds)", tm.APIVersion, tm.Kind)
	}
	obj := mk()
	j, err := yaml.YAMLToJSONStrict(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	strict, err := kjson.UnmarshalStrict(j, obj)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	if len(strict) > 0 {
		return nil, fmt.Errorf("%s: %w", tm.Kind, errors.Join(strict...))
	}
	return obj, nil
}

var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// load reads and strictly decodes every document of every manifest.
func load(t *testing.T) []doc {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	var docs []doc
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, part := range docSep.Split(string(b), -1) {
			if strings.TrimSpace(stripComments(part)) == "" {
				continue
			}
			d := doc{file: f, index: i, raw: []byte(part)}
			obj, err := decode(d.raw)
			if err != nil {
				t.Errorf("%s: %v", d, err)
				continue
			}
			d.obj = obj
			docs = append(docs, d)
		}
	}
	return docs
}

func stripComments(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// objects of type T among docs.
func objects[T any](docs []doc) []*T {
	var out []*T
	for _, d := range docs {
		if o, ok := d.obj.(*T); ok {
			out = append(out, o)
		}
	}
	return out
}

// set is every manifest, indexed for the cross-checks.
type set struct {
	docs       []doc
	secrets    map[string]*corev1.Secret
	configMaps map[string]*corev1.ConfigMap
	users      map[string]*KafkaUser
	topics     map[string]*KafkaTopic
	kafkas     []*Kafka
	pods       map[string]workload // Deployment or StatefulSet name → pod template
}

type workload struct {
	kind     string
	replicas *int32
	selector *metav1.LabelSelector
	tmpl     corev1.PodTemplateSpec
}

func index(t *testing.T) set {
	t.Helper()
	s := set{docs: load(t), secrets: map[string]*corev1.Secret{}, configMaps: map[string]*corev1.ConfigMap{},
		users: map[string]*KafkaUser{}, topics: map[string]*KafkaTopic{}, pods: map[string]workload{}}
	for _, o := range objects[corev1.Secret](s.docs) {
		s.secrets[o.Name] = o
	}
	for _, o := range objects[corev1.ConfigMap](s.docs) {
		s.configMaps[o.Name] = o
	}
	for _, o := range objects[KafkaUser](s.docs) {
		s.users[o.Name] = o
	}
	for _, o := range objects[KafkaTopic](s.docs) {
		name := o.Name
		if o.Spec.TopicName != "" {
			name = o.Spec.TopicName
		}
		s.topics[name] = o
	}
	s.kafkas = objects[Kafka](s.docs)
	for _, o := range objects[appsv1.Deployment](s.docs) {
		s.pods[o.Name] = workload{"Deployment", o.Spec.Replicas, o.Spec.Selector, o.Spec.Template}
	}
	for _, o := range objects[appsv1.StatefulSet](s.docs) {
		s.pods[o.Name] = workload{"StatefulSet", o.Spec.Replicas, o.Spec.Selector, o.Spec.Template}
	}
	return s
}

func ptrOr(p *int32, d int32) int32 {
	if p == nil {
		return d
	}
	return *p
}

// TestManifestsDecodeStrictly: every document is a known kind and decodes
// into its type with no unknown field; every object is in the namespace.
func TestManifestsDecodeStrictly(t *testing.T) {
	docs := load(t)
	counts := map[string]int{}
	for _, d := range docs {
		m := metaOf(d.obj)
		counts[fmt.Sprintf("%T", d.obj)]++
		if _, ns := d.obj.(*corev1.Namespace); !ns && m.GetNamespace() != "sluice" {
			t.Errorf("%s: %s is in namespace %q, want sluice", d, m.GetName(), m.GetNamespace())
		}
	}
	t.Logf("%d documents: %v", len(docs), counts)
	for _, want := range []string{"*v1.Deployment", "*v1.StatefulSet", "*v2.HorizontalPodAutoscaler", "*v1.PodDisruptionBudget",
		"*k8s.Kafka", "*k8s.KafkaNodePool", "*k8s.KafkaTopic", "*k8s.KafkaUser", "*k8s.ClickHouseInstallation"} {
		if counts[want] == 0 {
			t.Errorf("no %s among the manifests", want)
		}
	}
}

func metaOf(o any) metav1.Object {
	if m, ok := o.(metav1.Object); ok {
		return m
	}
	switch v := o.(type) {
	case *Kafka:
		return &v.ObjectMeta
	case *KafkaNodePool:
		return &v.ObjectMeta
	case *KafkaTopic:
		return &v.ObjectMeta
	case *KafkaUser:
		return &v.ObjectMeta
	case *ClickHouseInstallation:
		return &v.ObjectMeta
	}
	panic(fmt.Sprintf("no metadata in %T", o))
}

// TestTyposFail: a mutated copy of a manifest, one misspelt field or value
// each, fails to decode. The test above would catch nothing if decoding
// were lenient.
func TestTyposFail(t *testing.T) {
	tests := []struct{ file, from, to string }{
		{"20-gateway.yaml", "containerPort:", "containerPrt:"},
		{"20-gateway.yaml", "averageUtilization:", "averageUtilisation:"},
		{"20-gateway.yaml", "minAvailable:", "minAvaliable:"},
		{"20-gateway.yaml", "readinessProbe:", "readynessProbe:"},
		{"30-ledger.yaml", "podManagementPolicy:", "podManagmentPolicy:"},
		{"30-ledger.yaml", "containerPort: 9101", "containerPort: \"9101\""},
		{"10-config.yaml", "stringData:", "stringdata:"},
		{"70-kafka.yaml", "listeners:", "listener:"},
		{"70-kafka.yaml", "roles: [controller, broker]", "roles: [controler, broker]"},
		{"70-kafka.yaml", "authentication: {type: scram-sha-512}", "authentication: {type: scram-sha512}"},
		{"71-topics.yaml", "partitions: 8", "partitons: 8"},
		{"72-users.yaml", "patternType: prefix", "patternType: prefixed"},
		{"72-users.yaml", "operations: [Write, Describe]", "operations: [Write, Describ]"},
		{"60-clickhouse.yaml", "shardsCount:", "shardCount:"},
		{"60-clickhouse.yaml", "accessModes:", "accessMode:"},
		{"60-clickhouse.yaml", "policyTypes:", "policyType:"},
	}
	for _, tt := range tests {
		b, err := os.ReadFile(tt.file)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte(tt.from)) {
			t.Errorf("%s has no %q to mutate", tt.file, tt.from)
			continue
		}
		mutated := strings.Replace(string(b), tt.from, tt.to, 1)
		failed := false
		for _, part := range docSep.Split(mutated, -1) {
			if strings.Contains(part, tt.to) {
				_, err := decode([]byte(part))
				failed = err != nil
				if failed {
					t.Logf("%s %q → %q: %v", tt.file, tt.from, tt.to, err)
				}
			}
		}
		if !failed {
			t.Errorf("%s with %q misspelt as %q still decodes", tt.file, tt.from, tt.to)
		}
	}
}

// TestWorkloads: each workload runs a sluice service, as non-root with a
// read-only root, and everything it mounts or names exists: volumes,
// ConfigMaps, Secrets (ours, or those the Strimzi operators write for a
// KafkaUser and for the cluster CA), the KafkaUser of its SASL user.
func TestWorkloads(t *testing.T) {
	s := index(t)
	services := map[string]bool{"gateway": false, "ledger": false, "sink": false, "view": false}
	images := map[string]bool{}
	for name, w := range s.pods {
		sel, err := metav1.LabelSelectorAsSelector(w.selector)
		if err != nil || !sel.Matches(labels.Set(w.tmpl.Labels)) {
			t.Errorf("%s: selector %v does not match its pod labels %v (%v)", name, w.selector, w.tmpl.Labels, err)
		}
		ps := w.tmpl.Spec
		if ps.SecurityContext == nil || ps.SecurityContext.RunAsNonRoot == nil || !*ps.SecurityContext.RunAsNonRoot {
			t.Errorf("%s: pod must set runAsNonRoot", name)
		}
		vols := map[string]corev1.Volume{}
		for _, v := range ps.Volumes {
			vols[v.Name] = v
			switch {
			case v.Secret != nil && !s.secretExists(v.Secret.SecretName):
				t.Errorf("%s: volume %s names Secret %s, which nothing creates", name, v.Name, v.Secret.SecretName)
			case v.ConfigMap != nil && s.configMaps[v.ConfigMap.Name] == nil:
				t.Errorf("%s: volume %s names ConfigMap %s, which nothing creates", name, v.Name, v.ConfigMap.Name)
			}
		}
		for _, c := range ps.Containers {
			images[c.Image] = true
			if len(c.Args) == 0 {
				t.Errorf("%s/%s: no sluice subcommand in args", name, c.Name)
				continue
			}
			if _, ok := services[c.Args[0]]; !ok {
				t.Errorf("%s/%s: args[0] %q is not a sluice service", name, c.Name, c.Args[0])
			}
			services[c.Args[0]] = true
			sc := c.SecurityContext
			if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
				sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				t.Errorf("%s/%s: want readOnlyRootFilesystem and no privilege escalation", name, c.Name)
			}
			for _, m := range c.VolumeMounts {
				if _, ok := vols[m.Name]; !ok {
					t.Errorf("%s/%s: mounts %s, no such volume", name, c.Name, m.Name)
				}
				if m.SubPath != "" {
					t.Errorf("%s/%s: %s mounted with subPath: the kubelet never updates it (no reload)", name, c.Name, m.Name)
				}
			}
			for _, ef := range c.EnvFrom {
				if ef.SecretRef != nil && !s.secretExists(ef.SecretRef.Name) {
					t.Errorf("%s/%s: envFrom Secret %s, which nothing creates", name, c.Name, ef.SecretRef.Name)
				}
			}
			env := map[string]string{}
			for _, e := range c.Env {
				env[e.Name] = e.Value
			}
			if u := env["SLUICE_KAFKA_SASL_USER"]; s.users[u] == nil {
				t.Errorf("%s/%s: SASL user %q is no KafkaUser", name, c.Name, u)
			} else if !mountsSecret(c, vols, u, env["SLUICE_KAFKA_SASL_PASSWORD_FILE"]) {
				t.Errorf("%s/%s: %s is not a file of the KafkaUser Secret %s", name, c.Name, env["SLUICE_KAFKA_SASL_PASSWORD_FILE"], u)
			}
			if !strings.Contains(env["SLUICE_KAFKA_BROKERS"], s.kafkas[0].Name+"-kafka-bootstrap") {
				t.Errorf("%s/%s: brokers %q are not the Strimzi bootstrap of %s", name, c.Name, env["SLUICE_KAFKA_BROKERS"], s.kafkas[0].Name)
			}
		}
	}
	for svc, seen := range services {
		if !seen {
			t.Errorf("no workload runs sluice %s", svc)
		}
	}
	if len(images) != 1 {
		t.Errorf("want one image for every service, got %v", images)
	}
}

// secretExists: a Secret of the manifests, a KafkaUser's (the User
// Operator writes it) or a Kafka cluster's CA (the Cluster Operator's).
func (s set) secretExists(name string) bool {
	if s.secrets[name] != nil || s.users[name] != nil {
		return true
	}
	for _, k := range s.kafkas {
		if name == k.Name+"-cluster-ca-cert" {
			return true
		}
	}
	return false
}

// mountsSecret reports whether file is a file of Secret secret mounted in c.
func mountsSecret(c corev1.Container, vols map[string]corev1.Volume, secret, file string) bool {
	for _, m := range c.VolumeMounts {
		v := vols[m.Name]
		if v.Secret == nil || v.Secret.SecretName != secret {
			continue
		}
		for _, it := range v.Secret.Items {
			if filepath.Join(m.MountPath, it.Path) == file && it.Key == "password" {
				return true
			}
		}
	}
	return false
}

// TestFlagsExist: every --flag a manifest passes is one its subcommand
// has (`sluice <cmd> -h` of the binary the Makefile builds).
func TestFlagsExist(t *testing.T) {
	s := index(t)
	bin := filepath.Join(t.TempDir(), "sluice")
	build := exec.Command("go", "build", "-o", bin, "./services/sluice")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build sluice: %v\n%s", err, out)
	}
	help := map[string]string{}
	for name, w := range s.pods {
		for _, c := range w.tmpl.Spec.Containers {
			cmd := c.Args[0]
			if _, ok := help[cmd]; !ok {
				out, _ := exec.Command(bin, cmd, "-h").CombinedOutput() // -h exits 0 or 2 by command
				help[cmd] = string(out)
			}
			for _, a := range c.Args[1:] {
				flag, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
				if !regexp.MustCompile(`\n  -` + regexp.QuoteMeta(flag) + `[ \t\n]`).MatchString(help[cmd]) {
					t.Errorf("%s/%s: sluice %s has no flag -%s", name, c.Name, cmd, flag)
				}
			}
		}
	}
}

// TestGatewayConfigLoads: the gateway's ConfigMap is a valid config, and
// each provider's api_key_env is a key of the provider-keys Secret the
// gateway takes its environment from.
func TestGatewayConfigLoads(t *testing.T) {
	s := index(t)
	cm := s.configMaps["sluice-gateway-config"]
	keys := s.secrets["sluice-provider-keys"]
	if cm == nil || keys == nil {
		t.Fatal("no ConfigMap sluice-gateway-config or Secret sluice-provider-keys")
	}
	for k, v := range keys.StringData {
		t.Setenv(k, v)
	}
	cfg, err := config.Load(strings.NewReader(cm.Data["sluice.yaml"]))
	if err != nil {
		t.Fatalf("sluice.yaml of the ConfigMap: %v", err)
	}
	for _, p := range cfg.Providers {
		if _, ok := keys.StringData[p.APIKeyEnv]; !ok {
			t.Errorf("provider %s: api_key_env %s is not a key of Secret sluice-provider-keys", p.Name, p.APIKeyEnv)
		}
	}
}

// TestServicesAndPolicies: Services, the HPA and the PDBs point at
// workloads that exist, by labels the pods carry and ports they name.
func TestServicesAndPolicies(t *testing.T) {
	s := index(t)
	matches := func(sel labels.Selector) []string {
		var out []string
		for name, w := range s.pods {
			if sel.Matches(labels.Set(w.tmpl.Labels)) {
				out = append(out, name)
			}
		}
		return out
	}
	for _, svc := range objects[corev1.Service](s.docs) {
		hit := matches(labels.SelectorFromSet(svc.Spec.Selector))
		if len(hit) != 1 {
			t.Errorf("Service %s selects %v, want one workload", svc.Name, hit)
			continue
		}
		for _, p := range svc.Spec.Ports {
			if !hasPort(s.pods[hit[0]].tmpl.Spec, p.TargetPort.String()) {
				t.Errorf("Service %s: target port %s is not a port of %s", svc.Name, p.TargetPort.String(), hit[0])
			}
		}
	}
	for _, pdb := range objects[policyv1.PodDisruptionBudget](s.docs) {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if hit := matches(sel); err != nil || len(hit) != 1 {
			t.Errorf("PDB %s selects %v (%v), want one workload", pdb.Name, hit, err)
		}
	}
	hpas := objects[autoscalingv2.HorizontalPodAutoscaler](s.docs)
	for _, h := range hpas {
		w, ok := s.pods[h.Spec.ScaleTargetRef.Name]
		if !ok || w.kind != h.Spec.ScaleTargetRef.Kind {
			t.Errorf("HPA %s targets %s %s, which is not among the workloads", h.Name, h.Spec.ScaleTargetRef.Kind, h.Spec.ScaleTargetRef.Name)
		}
		if w.replicas != nil {
			t.Errorf("HPA %s: %s sets replicas, which every kubectl apply would reset the HPA's count to", h.Name, h.Spec.ScaleTargetRef.Name)
		}
		if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 2 {
			t.Errorf("HPA %s: minReplicas below 2 leaves one gateway", h.Name)
		}
	}
	if len(hpas) == 0 || hpas[0].Spec.ScaleTargetRef.Name != "sluice-gateway" {
		t.Error("the gateway has no HPA")
	}
}

func hasPort(ps corev1.PodSpec, p string) bool {
	for _, c := range ps.Containers {
		for _, cp := range c.Ports {
			if cp.Name == p || strconv.Itoa(int(cp.ContainerPort)) == p {
				return true
			}
		}
	}
	return false
}

// TestKafkaCluster: three brokers, replication factor 3, min.insync.replicas
// 2 for the cluster, the offsets and the transaction state; ACLs enforced.
func TestKafkaCluster(t *testing.T) {
	s := index(t)
	if len(s.kafkas) != 1 {
		t.Fatalf("want one Kafka, got %d", len(s.kafkas))
	}
	k := s.kafkas[0]
	brokers := int32(0)
	for _, p := range objects[KafkaNodePool](s.docs) {
		if p.Labels["strimzi.io/cluster"] != k.Name {
			t.Errorf("node pool %s belongs to %q, not %s", p.Name, p.Labels["strimzi.io/cluster"], k.Name)
		}
		if slices.Contains(p.Spec.Roles, "broker") {
			brokers += p.Spec.Replicas
		}
	}
	if brokers != 3 {
		t.Errorf("%d brokers, want 3", brokers)
	}
	want := map[string]string{"default.replication.factor": "3", "min.insync.replicas": "2", "offsets.topic.replication.factor": "3",
		"transaction.state.log.replication.factor": "3", "transaction.state.log.min.isr": "2", "allow.everyone.if.no.acl.found": "false"}
	for key, v := range want {
		if got := str(k.Spec.Kafka.Config[key]); got != v {
			t.Errorf("Kafka config %s = %q, want %q", key, got, v)
		}
	}
	if k.Spec.Kafka.Authorization == nil || k.Spec.Kafka.Authorization.Type != "simple" {
		t.Error("the Kafka cluster does not enforce ACLs (authorization: simple)")
	}
	if k.Spec.EntityOperator == nil || k.Spec.EntityOperator.TopicOperator == nil || k.Spec.EntityOperator.UserOperator == nil {
		t.Error("the KafkaTopics and KafkaUsers need the topic and user operators")
	}
}

func str(v any) string {
	switch x := v.(type) {
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case int64:
		return strconv.FormatInt(x, 10)
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}

// TestTopicsMatchBus: the KafkaTopics are the topics `sluice topics
// ensure` creates (internal/bus), same names, partitions and configs, at
// replication factor 3 with min.insync.replicas 2; the ledger group fits
// the requests partitions.
func TestTopicsMatchBus(t *testing.T) {
	s := index(t)
	specs := bus.DefaultTopics().Specs()
	var names []string
	for _, sp := range specs {
		names = append(names, sp.Name)
		kt := s.topics[sp.Name]
		if kt == nil {
			t.Errorf("no KafkaTopic %s", sp.Name)
			continue
		}
		if kt.Spec.Partitions != sp.Partitions || kt.Spec.Replicas != 3 {
			t.Errorf("%s: %d partitions × %d replicas, want %d × 3", sp.Name, kt.Spec.Partitions, kt.Spec.Replicas, sp.Partitions)
		}
		if kt.Labels["strimzi.io/cluster"] != s.kafkas[0].Name {
			t.Errorf("%s: cluster label %q", sp.Name, kt.Labels["strimzi.io/cluster"])
		}
		got := map[string]string{}
		for k, v := range kt.Spec.Config {
			got[k] = str(v)
		}
		wantCfg := map[string]string{"min.insync.replicas": "2"}
		for k, v := range sp.Configs {
			wantCfg[k] = v
		}
		if fmt.Sprint(got) != fmt.Sprint(wantCfg) {
			t.Errorf("%s: config %v, want %v", sp.Name, got, wantCfg)
		}
	}
	var have []string
	for n := range s.topics {
		have = append(have, n)
	}
	sort.Strings(names)
	sort.Strings(have)
	if !slices.Equal(names, have) {
		t.Errorf("KafkaTopics %v, want %v", have, names)
	}
	req := s.topics[bus.DefaultTopics().Names.OrDefault().Requests]
	if l, ok := s.pods["sluice-ledger"]; !ok || req == nil || ptrOr(l.replicas, 1) > req.Spec.Partitions {
		t.Errorf("ledger members must not outnumber the requests partitions")
	}
}

// TestUserACLs: the ACLs of docs/kafka-security.md, as the KafkaUsers
// hold them: each names a topic that exists (or a group or transactional
// id a service uses), and the roles that write sluice.requests are only
// the gateways (the admin writer is one) and the ledger.
func TestUserACLs(t *testing.T) {
	s := index(t)
	writers := []string{}
	for name, u := range s.users {
		if u.Spec.Authentication == nil || u.Spec.Authentication.Type != "scram-sha-512" {
			t.Errorf("KafkaUser %s: want scram-sha-512 authentication (the listener's)", name)
		}
		if u.Spec.Authorization == nil {
			t.Errorf("KafkaUser %s: no ACLs", name)
			continue
		}
		for _, a := range u.Spec.Authorization.ACLs {
			r := a.Resource
			switch r.Type {
			case "topic":
				if r.PatternType != "literal" || s.topics[r.Name] == nil {
					t.Errorf("KafkaUser %s: ACL on topic %s (%s) names no KafkaTopic", name, r.Name, r.PatternType)
				}
				if r.Name == "sluice.requests" && slices.Contains(a.Operations, "Write") {
					writers = append(writers, name)
				}
			case "group":
				if r.Name != "sluice-ledger" && r.Name != "sluice-sink" {
					t.Errorf("KafkaUser %s: group %s is not sluice-ledger or sluice-sink", name, r.Name)
				}
			case "transactionalId":
				// sluice-ledger-<node> (services/ledgerd) and the admin writer.
				if !(r.Name == "sluice-ledger-" && r.PatternType == "prefix") && r.Name != "sluice.admin.writer" {
					t.Errorf("KafkaUser %s: transactional id %s (%s) is none Sluice uses", name, r.Name, r.PatternType)
				}
			default:
				t.Errorf("KafkaUser %s: ACL on %s: no Sluice role needs one", name, r.Type)
			}
		}
	}
	sort.Strings(writers)
	if !slices.Equal(writers, []string{"sluice-admin", "sluice-gateway", "sluice-ledger"}) {
		t.Errorf("writers of sluice.requests %v, want only the gateways (serving, admin writer) and the ledger", writers)
	}
}

// TestAdminWriterSplit: one workload, of one replica, holds the
// config-signing key, and its Kafka principal is the only one that may
// write the admin topic or use the admin writer's transactional id; every
// other Sluice workload that reads the config (gateways, ledgers, the
// view) verifies it with the public key, mounted from a file. A serving
// gateway's credentials then can neither forge, roll back nor write admin
// changes (docs/admin-api.md, Signed config changes).
func TestAdminWriterSplit(t *testing.T) {
	s := index(t)
	var signers []string
	for name, w := range s.pods {
		vols := map[string]corev1.Volume{}
		for _, v := range w.tmpl.Spec.Volumes {
			vols[v.Name] = v
		}
		for _, c := range w.tmpl.Spec.Containers {
			env := map[string]string{}
			for _, e := range c.Env {
				env[e.Name] = e.Value
			}
			if c.Args[0] == "sink" {
				continue // reads events only, never a config
			}
			if f := env["SLUICE_ADMIN_PUBLIC_KEY"]; f == "" || !mountsFile(c, vols, f) {
				t.Errorf("%s/%s: SLUICE_ADMIN_PUBLIC_KEY %q is not a mounted file: it would accept unsigned config", name, c.Name, f)
			}
			f, ok := env["SLUICE_ADMIN_SIGNING_KEY"]
			if !ok {
				continue
			}
			signers = append(signers, name)
			if !mountsFile(c, vols, f) {
				t.Errorf("%s/%s: SLUICE_ADMIN_SIGNING_KEY %q is not a mounted file", name, c.Name, f)
			}
			if w.replicas == nil || *w.replicas != 1 {
				t.Errorf("%s: the admin writer wants exactly one replica", name)
			}
			if u := env["SLUICE_KAFKA_SASL_USER"]; u != "sluice-admin" {
				t.Errorf("%s/%s: the admin writer logs in as %q, want sluice-admin", name, c.Name, u)
			}
		}
	}
	if !slices.Equal(signers, []string{"sluice-admin-writer"}) {
		t.Errorf("workloads holding the signing key: %v, want only sluice-admin-writer", signers)
	}
	for name, u := range s.users {
		for _, a := range u.Spec.Authorization.ACLs {
			r := a.Resource
			adminWrite := r.Type == "topic" && r.Name == "sluice.admin" && slices.Contains(a.Operations, "Write") ||
				r.Type == "transactionalId" && r.Name == "sluice.admin.writer"
			if adminWrite && name != "sluice-admin" {
				t.Errorf("KafkaUser %s may %v %s %s: only sluice-admin writes admin changes", name, a.Operations, r.Type, r.Name)
			}
		}
	}
}

// mountsFile reports whether file is a file of a Secret or ConfigMap
// volume mounted in c (a volume without items holds every key).
func mountsFile(c corev1.Container, vols map[string]corev1.Volume, file string) bool {
	for _, m := range c.VolumeMounts {
		v := vols[m.Name]
		var items []corev1.KeyToPath
		switch {
		case v.Secret != nil:
			items = v.Secret.Items
		case v.ConfigMap != nil:
			items = v.ConfigMap.Items
		default:
			continue
		}
		if len(items) == 0 && filepath.Dir(file) == filepath.Clean(m.MountPath) {
			return true
		}
		for _, it := range items {
			if filepath.Join(m.MountPath, it.Path) == file {
				return true
			}
		}
	}
	return false
}

// TestClickHouse: the installation's default templates exist, and the
// sink dials the Service the operator names after it.
func TestClickHouse(t *testing.T) {
	s := index(t)
	chis := objects[ClickHouseInstallation](s.docs)
	if len(chis) != 1 {
		t.Fatalf("want one ClickHouseInstallation, got %d", len(chis))
	}
	c := chis[0]
	var pods, vols []string
	for _, p := range c.Spec.Templates.PodTemplates {
		pods = append(pods, p.Name)
	}
	for _, v := range c.Spec.Templates.VolumeClaimTemplates {
		vols = append(vols, v.Name)
	}
	if d := c.Spec.Defaults; d == nil || !slices.Contains(pods, d.Templates.PodTemplate) || !slices.Contains(vols, d.Templates.DataVolumeClaimTemplate) {
		t.Errorf("defaults name templates that do not exist (pod %v, volume %v)", pods, vols)
	}
	sink := s.pods["sluice-sink"].tmpl.Spec.Containers[0]
	want := "--clickhouse=clickhouse-" + c.Name + "." + c.Namespace + ".svc:9000"
	if !slices.Contains(sink.Args, want) {
		t.Errorf("sink args %v lack %s", sink.Args, want)
	}
}

// TestDockerfileBuildsLikeMake: the image's binary is built by `make
// build`, and what it copies is what that target writes.
func TestDockerfileBuildsLikeMake(t *testing.T) {
	df, err := os.ReadFile("../container/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	bin := regexp.MustCompile(`(?m)^BIN := (\S+)$`).FindSubmatch(mk)
	rule := regexp.MustCompile(`(?m)^build:.*\n\t(.*)$`).FindSubmatch(mk)
	if bin == nil || rule == nil || string(rule[1]) != "$(GO) build -o $(BIN) ./services/sluice" {
		t.Fatalf("the Makefile's build target changed (BIN %q, recipe %q): update deploy/container/Dockerfile and this test", bin, rule)
	}
	for _, want := range []string{"\nRUN make build\n", "COPY --from=build /src/" + string(bin[1]) + " ", "\nUSER 65532:65532\n", "FROM gcr.io/distroless/static"} {
		if !bytes.Contains(df, []byte(want)) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	gomod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	gov := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(gomod)
	if gov == nil || !bytes.Contains(df, []byte("ARG GO_VERSION="+string(gov[1])+"\n")) {
		t.Errorf("Dockerfile's GO_VERSION is not go.mod's go %s", gov)
	}
}
