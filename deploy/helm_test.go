package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/railmq/railmq/internal/testutil"
)

// Pinned tools: helm v4 (helm.sh/helm/v4, as the project's package list
// names it) and kubeconform.
const (
	helmPkg        = "helm.sh/helm/v4/cmd/helm@v4.3.2"
	kubeconformPkg = "github.com/yannh/kubeconform/cmd/kubeconform@v0.8.0"
)

// k8sTools returns helm, kubeconform and the -schema-location
// arguments: the Kubernetes kinds' schemas generated into a temporary
// directory, and the KEDA kinds' in k8s/schemas.
func k8sTools(t *testing.T) (helm, kubeconform string, locations []string) {
	t.Helper()
	helm = goTool(t, "helm", helmPkg)
	kubeconform = goTool(t, "kubeconform", kubeconformPkg)
	loc := writeK8sSchemas(t, t.TempDir())
	keda := filepath.Join(repoRoot(t), "deploy", "k8s", "schemas", "{{.ResourceKind}}{{.KindSuffix}}.json")
	return helm, kubeconform, []string{"-schema-location", loc, "-schema-location", keda}
}

// validate runs kubeconform -strict on the manifests in file and returns
// its output and error.
func validate(kubeconform string, locations []string, file string) (string, error) {
	args := append([]string{"-strict", "-summary", "-verbose"}, locations...)
	return command(5*time.Minute, nil, kubeconform, append(args, file)...)
}

// render runs helm template on the chart with args and writes the
// manifests to a file, whose path and text it returns.
func render(t *testing.T, helm string, args ...string) (string, string) {
	t.Helper()
	chart := filepath.Join(repoRoot(t), "deploy", "helm", "railmq")
	out := must(t, 5*time.Minute, helm, append([]string{"template", "rel", chart, "--namespace", "mq"}, args...)...)
	file := filepath.Join(t.TempDir(), "rendered.yaml")
	testutil.WriteFile(t, file, []byte(out))
	return file, out
}

// manifest is the rendered document of kind named name.
func manifest(t *testing.T, rendered, kind, name string) string {
	t.Helper()
	for _, doc := range strings.Split(rendered, "\n---\n") {
		if strings.Contains(doc, "\nkind: "+kind+"\n") && strings.Contains(doc, "\n  name: "+name+"\n") {
			return doc
		}
	}
	t.Fatalf("no %s %s in the rendered chart:\n%s", kind, name, rendered)
	return ""
}

// The chart passes helm lint, renders, and every manifest it renders is
// valid for the Kubernetes API (kubeconform -strict): with the default
// values, with a rabbitmq.conf, and with an existing Secret.
func TestHelmChartValid(t *testing.T) {
	helm, kubeconform, locations := k8sTools(t)
	chart := filepath.Join(repoRoot(t), "deploy", "helm", "railmq")
	must(t, 5*time.Minute, helm, "lint", "--strict", chart)
	for _, tc := range []struct {
		name  string
		args  []string
		kinds []string // rendered, each once
	}{
		{"defaults", nil, []string{"Secret", "Service", "StatefulSet", "PodDisruptionBudget"}},
		{"config", []string{"--set", "rabbitmqConf=consumer_timeout = 3600000", "--set", "persistence.storageClassName=fast"},
			[]string{"Secret", "ConfigMap", "Service", "StatefulSet", "PodDisruptionBudget"}},
		{"existing secret", []string{"--set", "auth.existingSecret=mine"}, []string{"Service", "StatefulSet", "PodDisruptionBudget"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file, rendered := render(t, helm, tc.args...)
			out, err := validate(kubeconform, locations, file)
			if err != nil {
				t.Fatalf("kubeconform: %v\n%s\n%s", err, out, rendered)
			}
			for _, k := range tc.kinds {
				if !strings.Contains(out, " - "+k+" ") {
					t.Errorf("kubeconform did not validate a %s:\n%s", k, out)
				}
			}
			if strings.Contains(out, "skipped") && !strings.Contains(out, "0 skipped") {
				t.Errorf("kubeconform skipped a resource:\n%s", out)
			}
		})
	}
}

// The validation does validate: a field the API does not have, or a
// value of the wrong type, fails kubeconform with the schemas the test
// makes.
func TestHelmSchemasStrict(t *testing.T) {
	_, kubeconform, locations := k8sTools(t)
	for _, bad := range []string{
		"apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: x\nspec:\n  maxUnavailable: 1\n  maxUnavaliable: 1\n",
		"apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: x\nspec:\n  replicas: three\n  serviceName: x\n  selector: {}\n  template: {}\n",
		"apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata:\n  name: x\nspec:\n  scaleTargetRef: {name: x}\n  triggers:\n    - type: rabbitmq\n      metadata: {queueLength: 5}\n",
	} {
		file := filepath.Join(t.TempDir(), "bad.yaml")
		testutil.WriteFile(t, file, []byte(bad))
		// Invalid, not an error such as a schema not found.
		if out, err := validate(kubeconform, locations, file); err == nil || !strings.Contains(out, "Invalid: 1, Errors: 0") {
			t.Errorf("kubeconform on\n%s: %v\n%s", bad, err, out)
		}
	}
}

// What the chart renders: 3 nodes of a StatefulSet behind a headless
// service that publishes not-ready pods, each node named by its pod's DNS
// name and given every peer's, data on a persistent volume per pod,
// readiness that waits for the node to have recovered (check_running),
// liveness, a disruption budget of one, memory limited (the watermark, a
// fraction, follows the limit: railmq reads the cgroup's).
func TestHelmChartRenders(t *testing.T) {
	helm := goTool(t, "helm", helmPkg)
	_, rendered := render(t, helm)
	sts := manifest(t, rendered, "StatefulSet", "rel-railmq")
	for _, want := range []string{
		"\n  replicas: 3\n",
		"\n  serviceName: rel-railmq-headless\n",
		"\n  podManagementPolicy: Parallel\n",
		`value: "rabbit@$(POD_NAME).rel-railmq-headless.mq.svc.cluster.local"`,
		"rabbit@rel-railmq-0.rel-railmq-headless.mq.svc.cluster.local=rel-railmq-0.rel-railmq-headless.mq.svc.cluster.local:25672," +
			"rabbit@rel-railmq-1.rel-railmq-headless.mq.svc.cluster.local=rel-railmq-1.rel-railmq-headless.mq.svc.cluster.local:25672," +
			"rabbit@rel-railmq-2.rel-railmq-headless.mq.svc.cluster.local=rel-railmq-2.rel-railmq-headless.mq.svc.cluster.local:25672\"",
		`command: ["rabbitmq-diagnostics", "-q", "check_running"]`,
		"livenessProbe:",
		"volumeClaimTemplates:",
		"mountPath: /var/lib/rabbitmq",
		"storage: 10Gi",
		"limits:\n              memory: 2Gi",
		"- name: RAILMQ_VM_MEMORY_HIGH_WATERMARK\n              value: \"0.4\"",
		"runAsUser: 999",
		"name: RABBITMQ_DEFAULT_PASS",
	} {
		if !strings.Contains(sts, want) {
			t.Errorf("the StatefulSet lacks %q:\n%s", want, sts)
		}
	}
	headless := manifest(t, rendered, "Service", "rel-railmq-headless")
	for _, want := range []string{"clusterIP: None", "publishNotReadyAddresses: true"} {
		if !strings.Contains(headless, want) {
			t.Errorf("the headless service lacks %q:\n%s", want, headless)
		}
	}
	if pdb := manifest(t, rendered, "PodDisruptionBudget", "rel-railmq"); !strings.Contains(pdb, "maxUnavailable: 1") {
		t.Errorf("the PodDisruptionBudget:\n%s", pdb)
	}
	// A fresh install generates the password and the cluster secret.
	secret := manifest(t, rendered, "Secret", "rel-railmq")
	for _, key := range []string{"username:", "password:", "cluster-secret:"} {
		if !strings.Contains(secret, key) {
			t.Errorf("the Secret lacks %s:\n%s", key, secret)
		}
	}
}

// The KEDA example is valid (kubeconform -strict against the Kubernetes
// API's Secret and KEDA's CRD fields), scales on a railmq queue's length
// and takes the broker's address from a Secret.
func TestKEDAExample(t *testing.T) {
	_, kubeconform, locations := k8sTools(t)
	file := filepath.Join(repoRoot(t), "deploy", "k8s", "keda-scaledobject.yaml")
	out, err := validate(kubeconform, locations, file)
	if err != nil {
		t.Fatalf("kubeconform %s: %v\n%s", file, err, out)
	}
	for _, k := range []string{"Secret", "TriggerAuthentication", "ScaledObject"} {
		if !strings.Contains(out, " - "+k+" ") {
			t.Errorf("kubeconform did not validate a %s:\n%s", k, out)
		}
	}
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"type: rabbitmq", "mode: QueueLength", "parameter: host", "authenticationRef:"} {
		if !strings.Contains(string(src), want) {
			t.Errorf("%s lacks %q", file, want)
		}
	}
}
