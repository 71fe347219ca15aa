package deploy

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The Kubernetes API's OpenAPI (swagger 2) document comes from a Go
// module that ships it, k8s.io/cli-runtime (artifacts/openapi/
// swagger.json, the API of the Kubernetes release the module is cut
// from): kubeconform's usual schemas are downloaded from the network,
// which CI lacks, and are made by the same conversion as here
// (kubeconform's openapi2jsonschema.py: each kind's definition with its
// references, strict: no property the API does not define).
const (
	openAPIModule = "k8s.io/cli-runtime@v0.37.2"
	openAPIFile   = "artifacts/openapi/swagger.json"
)

// k8sKinds are the kinds the chart and the KEDA example render, by the
// file name kubeconform asks for ({{.ResourceKind}}{{.KindSuffix}}.json)
// and their OpenAPI definition.
var k8sKinds = map[string]string{
	"secret-v1.json":                     "io.k8s.api.core.v1.Secret",
	"configmap-v1.json":                  "io.k8s.api.core.v1.ConfigMap",
	"service-v1.json":                    "io.k8s.api.core.v1.Service",
	"statefulset-apps-v1.json":           "io.k8s.api.apps.v1.StatefulSet",
	"poddisruptionbudget-policy-v1.json": "io.k8s.api.policy.v1.PodDisruptionBudget",
}

// writeK8sSchemas writes the JSON schemas of k8sKinds into dir, strict,
// and returns dir's kubeconform -schema-location template.
func writeK8sSchemas(t *testing.T, dir string) string {
	t.Helper()
	out, err := command(10*time.Minute, []string{"GOFLAGS=-mod=mod"}, "go", "mod", "download", "-json", openAPIModule)
	if err != nil {
		t.Fatalf("go mod download %s: %v\n%s", openAPIModule, err, out)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal([]byte(out), &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download -json %s: %v\n%s", openAPIModule, err, out)
	}
	raw, err := os.ReadFile(filepath.Join(mod.Dir, openAPIFile))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Definitions map[string]any `json:"definitions"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s: %v", openAPIFile, err)
	}
	defs := map[string]any{}
	for name, d := range doc.Definitions {
		defs[name] = strictSchema(name, d)
	}
	for file, name := range k8sKinds {
		def, ok := defs[name].(map[string]any)
		if !ok {
			t.Fatalf("%s has no definition %s", openAPIFile, name)
		}
		s := map[string]any{}
		for k, v := range def {
			s[k] = v
		}
		s["definitions"] = defs // what its $refs (#/definitions/...) point at
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, file), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "{{.ResourceKind}}{{.KindSuffix}}.json")
}

// strictSchema is the OpenAPI definition name turned into a JSON schema
// as openapi2jsonschema.py --strict makes it: an object with properties
// takes no others, and IntOrString and Quantity (strings in the OpenAPI
// document, with a format) take a string or an integer, as the API does.
func strictSchema(name string, d any) any {
	switch name {
	case "io.k8s.apimachinery.pkg.util.intstr.IntOrString", "io.k8s.apimachinery.pkg.api.resource.Quantity":
		return map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}}
	}
	return strictNode(d)
}

func strictNode(v any) any {
	switch n := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, c := range n {
			if k == "properties" {
				props := map[string]any{}
				for p, s := range c.(map[string]any) {
					props[p] = strictNode(s)
				}
				out[k] = props
				continue
			}
			out[k] = strictNode(c)
		}
		if f, _ := n["format"].(string); f == "int-or-string" {
			return map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}}
		}
		_, props := n["properties"]
		_, extra := n["additionalProperties"]
		if props && !extra && n["x-kubernetes-preserve-unknown-fields"] != true {
			out["additionalProperties"] = false
		}
		return out
	case []any:
		out := make([]any, len(n))
		for i, c := range n {
			out[i] = strictNode(c)
		}
		return out
	}
	return v
}

// goTool is the path of a tool the test drives: on the PATH, in
// GOPATH/bin, or go install'ed there (pkg@version) on first use.
func goTool(t *testing.T, name, pkg string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	gopath, err := command(time.Minute, nil, "go", "env", "GOPATH")
	if err != nil {
		t.Fatalf("go env GOPATH: %v\n%s", err, gopath)
	}
	bin := filepath.Join(strings.Split(strings.TrimSpace(gopath), string(os.PathListSeparator))[0], "bin", name)
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if out, err := command(20*time.Minute, []string{"GOFLAGS=-mod=mod"}, "go", "install", pkg); err != nil {
		t.Fatalf("go install %s: %v\n%s", pkg, err, out)
	}
	return bin
}
