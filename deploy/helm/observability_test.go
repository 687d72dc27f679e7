package helm

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/yaml"
)

// The chart's copies of the alert rules and the dashboard are monitoring/'s files, byte for
// byte: the PrometheusRule and the dashboard ConfigMap are built from them, so what promtool
// tests (make test-monitoring) is what a cluster runs. Copy them again after changing monitoring/.
func TestChartMonitoringFilesAreMonitorings(t *testing.T) {
	for chartFile, source := range map[string]string{
		"files/alerts.yaml":             "../../monitoring/prometheus/alerts.yaml",
		"files/choria-provisioner.json": "../../monitoring/grafana/choria-provisioner.json",
	} {
		got, want := readFile(t, filepath.Join(chartDir, chartFile)), readFile(t, source)
		if !bytes.Equal(got, want) {
			t.Errorf("%s/%s differs from %s: cp %s %s/%s", chartDir, chartFile, source, source, chartDir, chartFile)
		}
	}
}

// Every values file renders the probes on the health port, the health port in the configuration
// and the termination grace from the values.
func TestChartProbes(t *testing.T) {
	for _, s := range sites(t) {
		t.Run(s.name, func(t *testing.T) {
			r := render(t, nil, s.files...)
			d := r.deployment(t, fullname)
			c := container(t, d.Spec.Template.Spec.Containers, "provisioner")
			for name, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
				want := "/healthz"
				if name == "readiness" {
					want = "/readyz"
				}
				if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != want || p.HTTPGet.Port.String() != "health" {
					t.Fatalf("%s probe: %+v, want GET %s on port health", name, p, want)
				}
				if p.PeriodSeconds < 1 || p.FailureThreshold < 1 || p.TimeoutSeconds < 1 {
					t.Errorf("%s probe without its timing: %+v", name, p)
				}
			}
			port := -1
			for _, p := range c.Ports {
				if p.Name == "health" {
					port = int(p.ContainerPort)
				}
			}
			cfg, _ := loadProvisioner(t, r, s.fixtures, d)
			if port != cfg.HealthPort || port != 9465 {
				t.Errorf("container port health %d, health_port %d: want both 9465", port, cfg.HealthPort)
			}
			// the kubelet probes the pod's IP: the default, loopback, would fail every probe
			if cfg.HealthAddress != "0.0.0.0" {
				t.Errorf("health_address %q: want 0.0.0.0", cfg.HealthAddress)
			}
			wantGrace := int64(30)
			if s.name == "mutual TLS to Temporal, 3 replicas" {
				wantGrace = 60
			}
			if g := d.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || *g != wantGrace {
				t.Errorf("terminationGracePeriodSeconds %v, want %d", g, wantGrace)
			}
			// the helm test hook runs check on the provisioner's files
			pod, ok := r.pods[fullname+"-check"]
			if !ok {
				t.Fatalf("no helm test pod (have %v)", keys(r.pods))
			}
			checkC := container(t, pod.Spec.Containers, "check")
			if pod.Annotations["helm.sh/hook"] != "test" || checkC.Args[0] != "check" || arg(t, checkC, "--config") != arg(t, c, "--config") ||
				mustJSON(t, checkC.VolumeMounts) != mustJSON(t, c.VolumeMounts) || mustJSON(t, checkC.Env) != mustJSON(t, c.Env) {
				t.Errorf("the test pod does not run check on what the provisioner runs on: %+v", pod)
			}
			if pod.Labels["app.kubernetes.io/component"] == "provisioner" {
				t.Error("the test pod carries the provisioner's labels: its ReplicaSet would adopt it")
			}
			checkRestricted(t, pod.Name, pod.Spec, corev1.PodTemplateSpec{ObjectMeta: pod.ObjectMeta, Spec: pod.Spec})
		})
	}
}

// The mTLS site turns on everything a Kubernetes site monitors with: the metrics Service, a
// ServiceMonitor that scrapes it as job choria-provisioner, the PrometheusRule of the alerts, the
// dashboard for Grafana's sidecar, and a NetworkPolicy.
func TestChartObservability(t *testing.T) {
	r := render(t, nil, "examples/mtls-site.yaml")
	svc, ok := r.services[fullname+"-metrics"]
	if !ok {
		t.Fatalf("no metrics Service (have %v)", keys(r.services))
	}
	ports := map[string]int32{}
	for _, p := range svc.Spec.Ports {
		ports[p.Name] = p.Port
	}
	if ports["metrics"] != 9464 || ports["health"] != 9465 {
		t.Errorf("metrics Service ports %v", ports)
	}
	d := r.deployment(t, fullname)
	for k, v := range svc.Spec.Selector {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("the metrics Service selects %s=%s, which the pods do not carry", k, v)
		}
	}

	sm, ok := r.monitors[fullname]
	if !ok {
		t.Fatalf("no ServiceMonitor (have %v)", keys(r.monitors))
	}
	for k, v := range sm.Spec.Selector.MatchLabels {
		if svc.Labels[k] != v {
			t.Errorf("the ServiceMonitor selects %s=%s, which the metrics Service does not carry", k, v)
		}
	}
	if sm.Labels["release"] != "kube-prometheus-stack" || len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "metrics" {
		t.Errorf("ServiceMonitor: %+v", sm)
	}
	job := false
	for _, rl := range sm.Spec.Endpoints[0].RelabelConfigs {
		job = job || (rl.TargetLabel == "job" && rl.Replacement != nil && *rl.Replacement == "choria-provisioner")
	}
	if !job {
		t.Error("the ServiceMonitor does not name the job choria-provisioner, which the alerts expect")
	}

	rule, ok := r.rules[fullname]
	if !ok {
		t.Fatalf("no PrometheusRule (have %v)", keys(r.rules))
	}
	var want monitoringv1.PrometheusRuleSpec
	if err := yaml.UnmarshalStrict(readFile(t, "../../monitoring/prometheus/alerts.yaml"), &want); err != nil {
		t.Fatal(err)
	}
	if mustJSON(t, rule.Spec) != mustJSON(t, want) {
		t.Errorf("the PrometheusRule is not monitoring/prometheus/alerts.yaml:\n%s\n%s", mustJSON(t, rule.Spec), mustJSON(t, want))
	}
	if n := len(want.Groups[0].Rules); n < 10 {
		t.Errorf("%d rules: the new alerts are missing", n)
	}

	dash, ok := r.configMaps[fullname+"-dashboard"]
	if !ok {
		t.Fatalf("no dashboard ConfigMap (have %v)", keys(r.configMaps))
	}
	if dash.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard labels %v: Grafana's sidecar looks for grafana_dashboard: \"1\"", dash.Labels)
	}
	src := readFile(t, "../../monitoring/grafana/choria-provisioner.json")
	if dash.Data["choria-provisioner.json"] != string(bytes.TrimRight(src, "\n")) || !json.Valid([]byte(dash.Data["choria-provisioner.json"])) {
		t.Error("the dashboard ConfigMap does not hold monitoring/grafana/choria-provisioner.json")
	}

	np, ok := r.policies[fullname]
	if !ok {
		t.Fatalf("no NetworkPolicy (have %v)", keys(r.policies))
	}
	checkNetworkPolicy(t, np, d.Spec.Template.Labels, map[int32]bool{53: true, 7233: true, 4222: true})
	if from := np.Spec.Ingress[0].From; len(from) != 1 || from[0].NamespaceSelector == nil {
		t.Errorf("ingress from %+v, want the monitoring namespace", from)
	}
}

// checkNetworkPolicy: the policy selects the provisioner's pods, restricts both directions,
// lets in only the health and metrics ports, and lets out each of egress's ports.
func checkNetworkPolicy(t *testing.T, np *networkingv1.NetworkPolicy, podLabels map[string]string, egress map[int32]bool) {
	t.Helper()
	for k, v := range np.Spec.PodSelector.MatchLabels {
		if podLabels[k] != v {
			t.Errorf("the NetworkPolicy selects %s=%s, which the pods do not carry", k, v)
		}
	}
	if len(np.Spec.PolicyTypes) != 2 {
		t.Errorf("policy types %v: ingress and egress", np.Spec.PolicyTypes)
	}
	for _, rule := range np.Spec.Ingress {
		for _, p := range rule.Ports {
			if p.Port.String() != "health" && p.Port.String() != "metrics" {
				t.Errorf("ingress on port %s", p.Port)
			}
		}
	}
	got := map[int32]bool{}
	for _, rule := range np.Spec.Egress {
		for _, p := range rule.Ports {
			got[p.Port.IntVal] = true
		}
	}
	for port := range egress {
		if !got[port] {
			t.Errorf("no egress to port %d (have %v)", port, got)
		}
	}
}

// The Temporal Cloud site's policy lets out Temporal's port and the helper's CMDB besides the
// broker and DNS; without Prometheus the Service has the health port alone and no monitor.
func TestChartNetworkPolicyCloud(t *testing.T) {
	r := render(t, nil, "examples/temporal-cloud.yaml")
	d := r.deployment(t, fullname)
	np, ok := r.policies[fullname]
	if !ok {
		t.Fatalf("no NetworkPolicy (have %v)", keys(r.policies))
	}
	checkNetworkPolicy(t, np, d.Spec.Template.Labels, map[int32]bool{53: true, 7233: true, 4222: true, 443: true})
	svc := r.services[fullname+"-metrics"]
	if svc == nil || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "health" {
		t.Errorf("without Prometheus the Service has the health port alone: %+v", svc)
	}
	if len(r.monitors)+len(r.rules) != 0 {
		t.Error("a ServiceMonitor or PrometheusRule nobody asked for")
	}
	// the default values make none of the optional objects
	r = render(t, nil)
	if len(r.monitors)+len(r.rules)+len(r.policies) != 0 || r.configMaps[fullname+"-dashboard"] != nil {
		t.Error("the default values turn on an optional object")
	}
}

// nameOverride and fullnameOverride name every object, and the labels follow nameOverride.
func TestChartNameOverrides(t *testing.T) {
	r := render(t, map[string]any{"fullnameOverride": "prov", "dashboard": map[string]any{"enabled": true}})
	for _, name := range []string{"prov", "prov-metrics", "prov-check", "prov-dashboard"} {
		_, d := r.deployments[name]
		_, s := r.services[name]
		_, p := r.pods[name]
		_, c := r.configMaps[name]
		if !d && !s && !p && !c {
			t.Errorf("no object named %s", name)
		}
	}
	r = render(t, map[string]any{"nameOverride": "agent"})
	d := r.deployment(t, releaseName+"-agent")
	if d.Spec.Template.Labels["app.kubernetes.io/name"] != "agent" || d.Spec.Selector.MatchLabels["app.kubernetes.io/name"] != "agent" {
		t.Errorf("labels %v do not follow nameOverride", d.Spec.Template.Labels)
	}
}

// health_port is the chart's alone: written in provisioner.config it is refused, as monitor_port.
func TestChartRefusesHealthPortInConfig(t *testing.T) {
	_, err := renderValues(t, map[string]any{"provisioner": map[string]any{"config": map[string]any{"health_port": 9000}}})
	if err == nil {
		t.Fatal("provisioner.config.health_port was accepted")
	}
	_, err = renderValues(t, map[string]any{"health": map[string]any{"port": 8080}})
	if err == nil {
		t.Fatal("health.port equal to prometheus.port was accepted")
	}
}
