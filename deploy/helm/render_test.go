// Package helm tests the choria-provisioner chart: rendered with Helm's own engine as `helm
// template` renders it, every object decoded strictly into Kubernetes' API types, the pods
// checked against the restricted Pod Security Standard, and the provisioner's configuration
// loaded, from the files a kubelet would mount, by the project's own config loader.
package helm

import (
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
)

const (
	chartDir    = "choria-provisioner"
	releaseName = "choria-provisioner"
	namespace   = "provisioning"
)

// rendered is one release's objects by kind and name.
type rendered struct {
	notes       string
	deployments map[string]*appsv1.Deployment
	configMaps  map[string]*corev1.ConfigMap
	secrets     map[string]*corev1.Secret
	services    map[string]*corev1.Service
	pdbs        map[string]*policyv1.PodDisruptionBudget
	ingresses   map[string]*networkingv1.Ingress
	policies    map[string]*networkingv1.NetworkPolicy
	pods        map[string]*corev1.Pod // helm test hooks
	monitors    map[string]*monitoringv1.ServiceMonitor
	rules       map[string]*monitoringv1.PrometheusRule
	count       int
}

// decoder refuses unknown and duplicate fields and kinds outside the scheme: what an API server
// with strict field validation would refuse.
func decoder(t *testing.T) runtime.Decoder {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme, networkingv1.AddToScheme,
		monitoringv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	return json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme, json.SerializerOptions{Yaml: true, Strict: true})
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("loading the chart: %v", err)
	}
	return ch
}

// renderValues renders the chart with the values files merged in order (as helm's -f) and then
// set, and returns the templates' output by file name.
func renderValues(t *testing.T, set map[string]any, files ...string) (map[string]string, error) {
	t.Helper()
	ch := loadChart(t)
	vals := map[string]any{}
	for _, f := range files {
		v, err := common.ReadValuesFile(f)
		if err != nil {
			t.Fatalf("reading %s: %v", f, err)
		}
		vals = util.MergeTables(v.AsMap(), vals)
	}
	vals = util.MergeTables(set, vals)
	top, err := util.ToRenderValuesWithSchemaValidation(ch, vals,
		common.ReleaseOptions{Name: releaseName, Namespace: namespace, Revision: 1, IsInstall: true}, nil, false)
	if err != nil {
		return nil, err
	}
	// Strict: a template that reads a value the chart does not define fails, as `helm lint --strict`
	return engine.Engine{Strict: true}.Render(ch, top)
}

var docSeparator = regexp.MustCompile(`(?m)^---\s*$`)

// render renders and decodes; every object must decode strictly into a known type.
func render(t *testing.T, set map[string]any, files ...string) *rendered {
	t.Helper()
	out, err := renderValues(t, set, files...)
	if err != nil {
		t.Fatalf("rendering with %v %v: %v", files, set, err)
	}
	dec := decoder(t)
	r := &rendered{deployments: map[string]*appsv1.Deployment{}, configMaps: map[string]*corev1.ConfigMap{},
		secrets: map[string]*corev1.Secret{}, services: map[string]*corev1.Service{},
		pdbs: map[string]*policyv1.PodDisruptionBudget{}, ingresses: map[string]*networkingv1.Ingress{},
		policies: map[string]*networkingv1.NetworkPolicy{}, pods: map[string]*corev1.Pod{},
		monitors: map[string]*monitoringv1.ServiceMonitor{}, rules: map[string]*monitoringv1.PrometheusRule{}}
	names := make([]string, 0, len(out))
	for name := range out {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		switch {
		case strings.HasSuffix(name, "NOTES.txt"):
			r.notes = out[name]
			continue
		case !strings.HasSuffix(name, ".yaml") || strings.HasPrefix(filepath.Base(name), "_"):
			continue
		}
		for i, doc := range docSeparator.Split(out[name], -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			obj, gvk, err := dec.Decode([]byte(doc), nil, nil)
			if err != nil {
				t.Fatalf("%s, document %d: %v\n%s", name, i, err, doc)
			}
			if err := r.add(obj); err != nil {
				t.Fatalf("%s, document %d (%s): %v", name, i, gvk, err)
			}
		}
	}
	return r
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

func (r *rendered) add(obj runtime.Object) error {
	r.count++
	stored := store(r.deployments, obj) || store(r.configMaps, obj) || store(r.secrets, obj) ||
		store(r.services, obj) || store(r.pdbs, obj) || store(r.ingresses, obj) || store(r.policies, obj) ||
		store(r.pods, obj) || store(r.monitors, obj) || store(r.rules, obj)
	if !stored {
		return fmt.Errorf("the chart renders a %T, which this test does not check", obj)
	}
	o := obj.(metav1.Object) // every kind store takes is one
	if name, ns := o.GetName(), o.GetNamespace(); name == "" || ns != namespace {
		return fmt.Errorf("%T named %q in namespace %q: every object needs a name and the release's namespace", obj, name, ns)
	}
	return nil
}

// store files obj by name in m when it is of m's kind, and says whether it was.
func store[T metav1.Object](m map[string]T, obj runtime.Object) bool {
	o, ok := obj.(T)
	if ok {
		m[o.GetName()] = o
	}
	return ok
}

func (r *rendered) deployment(t *testing.T, name string) *appsv1.Deployment {
	t.Helper()
	d, ok := r.deployments[name]
	if !ok {
		t.Fatalf("no Deployment %s (have %v)", name, keys(r.deployments))
	}
	return d
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
