package helm

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"

	"github.com/choria-temporal/provisioner/config"
	"github.com/choria-temporal/provisioner/internal/testpki"
)

const fullname = releaseName // the release is named as the chart, so objects carry its name alone

// site is a values file as a site would write it, the Secrets and ConfigMaps it creates
// itself, and what its provisioner must end up configured with.
type site struct {
	name     string
	files    []string
	fixtures fixtures
	replicas int32
	// secrets are values that must reach the pods only through Secrets
	secrets []string
	check   func(t *testing.T, r *rendered, cfg *config.Config, client map[string]string)
}

func TestChartSites(t *testing.T) {
	for _, s := range sites(t) {
		t.Run(s.name, func(t *testing.T) {
			r := render(t, nil, s.files...)
			d := r.deployment(t, fullname)
			if got := *d.Spec.Replicas; got != s.replicas {
				t.Fatalf("replicas: %d, want %d", got, s.replicas)
			}
			checkActiveActive(t, r, d)
			for _, dep := range r.deployments {
				checkHardened(t, dep)
				checkSecretsMounted(t, r, dep, s.secrets)
			}
			cfg, client := loadProvisioner(t, r, s.fixtures, d)
			s.check(t, r, cfg, client)
			lintChart(t, s.files)
		})
	}
}

func sites(t *testing.T) []site {
	codecKey := []byte("0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0\n")
	helper := map[string]map[string]string{"provisioner-helper": {"provision-helper": "#!/bin/sh\necho '{\"defer\": true, \"msg\": \"example\"}'\n"}}
	brokerTLS := map[string][]byte{"cert.pem": []byte("-----BEGIN CERTIFICATE-----\n"), "key.pem": []byte("-----BEGIN PRIVATE KEY-----\n"), "ca.pem": []byte("-----BEGIN CERTIFICATE-----\n")}
	signerCert := map[string][]byte{"signer.pem": []byte("-----BEGIN PUBLIC KEY-----\n")}

	pki := testpki.New(t, "Temporal CA")
	certFile, keyFile := pki.Leaf(t, "provisioner", "provisioner.provisioning", nil)
	temporalTLS := map[string][]byte{"tls.crt": readFile(t, certFile), "tls.key": readFile(t, keyFile), "ca.crt": readFile(t, pki.CAFile)}

	return []site{{
		name:     "default values",
		replicas: 2,
		fixtures: fixtures{configMaps: helper, secrets: map[string]map[string][]byte{
			"provisioner-client-tls": brokerTLS, "jwt-signer-cert": signerCert, "choria-provisioner-codec": {"codec.key": codecKey},
		}},
		secrets: []string{string(codecKey)},
		check:   checkDefaults,
	}, {
		name:     "mutual TLS to Temporal, 3 replicas",
		files:    []string{"examples/mtls-site.yaml"},
		replicas: 3,
		fixtures: fixtures{configMaps: helper, secrets: map[string]map[string][]byte{
			"provisioner-codec":            {"codec.key": codecKey},
			"provisioner-temporal-tls":     temporalTLS,
			"provisioner-choria":           {"provisioner.jwt": []byte("eyJhbGciOi.x.y"), "provisioner.seed": []byte("seed"), "ca.pem": []byte("-----BEGIN CERTIFICATE-----\n")},
			"provisioner-signer":           {"signer.seed": []byte("signer-seed"), "signer.jwt": []byte("eyJhbGciOi.signer.jwt")},
			"provisioner-codec-token":      {"token": []byte("codec-bearer-token")},
			"provisioner-codec-server-tls": {"tls.crt": temporalTLS["tls.crt"], "tls.key": temporalTLS["tls.key"]},
		}},
		secrets: []string{string(codecKey), "provisioning-t0ken", "broker-provisioning-s3cret", "codec-bearer-token", "signer-seed"},
		check:   checkMutualTLS,
	}, {
		name:     "Temporal Cloud with an API key",
		files:    []string{"examples/temporal-cloud.yaml"},
		replicas: 2,
		fixtures: fixtures{configMaps: helper, secrets: map[string]map[string][]byte{
			"provisioner-codec":         {"codec.key": codecKey},
			"provisioner-cloud-api-key": {"api-key": []byte("tmprl-api-key-0123456789\n")},
			"provisioner-client-tls":    brokerTLS,
			"provisioner-secrets":       {"token": []byte("cloud-token"), "password": []byte("cloud-broker-password")},
			"jwt-signer-cert":           signerCert,
		}},
		secrets: []string{string(codecKey), "tmprl-api-key-0123456789", "cloud-token", "cloud-broker-password"},
		check:   checkCloud,
	}}
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// loadProvisioner loads the provisioner container's configuration with the project's own
// loader, from the files its volumes hold and its environment, and checks that the setup
// container sees the same.
func loadProvisioner(t *testing.T, r *rendered, fx fixtures, d *appsv1.Deployment) (*config.Config, map[string]string) {
	t.Helper()
	spec := d.Spec.Template.Spec
	c := container(t, spec.Containers, "provisioner")
	if len(c.Args) == 0 || c.Args[0] != "run" {
		t.Fatalf("the provisioner container runs %v, want run", c.Args)
	}
	for _, ic := range spec.InitContainers {
		if mustJSON(t, ic.VolumeMounts) != mustJSON(t, c.VolumeMounts) || mustJSON(t, ic.Env) != mustJSON(t, c.Env) {
			t.Errorf("init container %s does not see what the provisioner sees", ic.Name)
		}
		if arg(t, ic, "--config") != arg(t, c, "--config") {
			t.Errorf("init container %s reads another configuration", ic.Name)
		}
	}
	p := mount(t, r, fx, spec, c)
	p.setenv(t)
	file := p.rebase(t, arg(t, c, "--config"))
	clientFile := p.rebase(t, arg(t, c, "--choria-config"))
	cfg, err := config.Load(file)
	if err != nil {
		t.Fatalf("the rendered configuration does not load: %v\n%s", err, readFile(t, file))
	}
	if cfg.ChoriaConfig != clientFile {
		t.Errorf("choria_config %s, want the client.cfg the container is given (%s)", cfg.ChoriaConfig, clientFile)
	}
	client := choriaConfig(t, clientFile)
	for k, v := range client {
		if strings.HasPrefix(v, p.root) {
			if st, err := os.Stat(v); err != nil || !st.Mode().IsRegular() {
				t.Errorf("client.cfg %s = %s: not a file the container has (%v)", k, v, err)
			}
		}
	}
	return cfg, client
}

func container(t *testing.T, cs []corev1.Container, name string) corev1.Container {
	t.Helper()
	for _, c := range cs {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %s", name)
	return corev1.Container{}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkActiveActive: every replica is a full worker, so nothing elects a leader, a rollout
// starts the new pod before stopping an old one, and a drain takes one at a time.
func checkActiveActive(t *testing.T, r *rendered, d *appsv1.Deployment) {
	t.Helper()
	cm := r.configMaps[fullname]
	if cm == nil {
		t.Fatalf("no ConfigMap %s", fullname)
	}
	if strings.Contains(cm.Data["choria-provisioner.yaml"], "leader_election") {
		t.Errorf("the configuration names leader_election:\n%s", cm.Data["choria-provisioner.yaml"])
	}
	if s := d.Spec.Strategy; s.Type != appsv1.RollingUpdateDeploymentStrategyType || s.RollingUpdate == nil || s.RollingUpdate.MaxUnavailable.IntValue() != 0 {
		t.Errorf("strategy %+v: want a rolling update that keeps every replica until its successor runs", s)
	}
	pdb, ok := r.pdbs[fullname]
	if *d.Spec.Replicas > 1 != ok {
		t.Errorf("%d replicas, PodDisruptionBudget rendered: %v", *d.Spec.Replicas, ok)
	}
	if ok && (pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1) {
		t.Errorf("PodDisruptionBudget maxUnavailable %v, want 1", pdb.Spec.MaxUnavailable)
	}
	if *d.Spec.Replicas > 1 && len(d.Spec.Template.Spec.TopologySpreadConstraints) == 0 {
		t.Error("replicas are not spread across nodes")
	}
}

// checkHardened: the pod is as confined as the systemd unit's sandbox (User=, NoNewPrivileges,
// an empty CapabilityBoundingSet, ProtectSystem=strict, SystemCallFilter) and passes the
// restricted Pod Security Standard.
func checkHardened(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	spec := d.Spec.Template.Spec
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: pod securityContext %+v: want runAsNonRoot and the RuntimeDefault seccomp profile", d.Name, psc)
	}
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		t.Errorf("%s: shares a host namespace", d.Name)
	}
	if spec.AutomountServiceAccountToken == nil && spec.ServiceAccountName == "" {
		t.Errorf("%s: mounts the default service account's token", d.Name)
	}
	for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
		sc := c.SecurityContext
		switch {
		case sc == nil:
			t.Errorf("%s/%s: no securityContext", d.Name, c.Name)
			continue
		case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
			t.Errorf("%s/%s: runAsNonRoot not set", d.Name, c.Name)
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
			t.Errorf("%s/%s: privilege escalation allowed", d.Name, c.Name)
		case sc.Privileged == nil || *sc.Privileged:
			t.Errorf("%s/%s: privileged not false", d.Name, c.Name)
		case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
			t.Errorf("%s/%s: root filesystem writable", d.Name, c.Name)
		case sc.Capabilities == nil || len(sc.Capabilities.Add) != 0 || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL":
			t.Errorf("%s/%s: capabilities %+v, want drop [ALL] and nothing added", d.Name, c.Name, sc.Capabilities)
		case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
			t.Errorf("%s/%s: seccomp %+v, want RuntimeDefault", d.Name, c.Name, sc.SeccompProfile)
		}
	}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			t.Errorf("%s: hostPath volume %s", d.Name, v.Name)
		}
	}
	checkRestricted(t, d.Name, spec, d.Spec.Template)
}

func checkRestricted(t *testing.T, name string, spec corev1.PodSpec, tmpl corev1.PodTemplateSpec) {
	t.Helper()
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	lv := psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}
	for _, res := range eval.EvaluatePod(lv, &tmpl.ObjectMeta, &spec) {
		if !res.Allowed {
			t.Errorf("%s: the restricted Pod Security Standard refuses it: %s: %s", name, res.ForbiddenReason, res.ForbiddenDetail)
		}
	}
}

// checkSecretsMounted: secrets are files from read-only Secret volumes where the configuration
// takes a file (codec key, API key, TLS, signer); the two it takes no file for (token, broker
// password) come from a secretKeyRef; nothing else in the environment is a literal value, and
// no secret's text is in any object but a Secret.
func checkSecretsMounted(t *testing.T, r *rendered, d *appsv1.Deployment, secrets []string) {
	t.Helper()
	spec := d.Spec.Template.Spec
	secretVolumes := map[string]bool{}
	for _, v := range spec.Volumes {
		if v.Secret != nil {
			secretVolumes[v.Name] = true
			if v.Secret.DefaultMode == nil || *v.Secret.DefaultMode != 0o440 || len(v.Secret.Items) == 0 {
				t.Errorf("%s: Secret volume %s: want mode 0440 and only the keys it needs projected", d.Name, v.Name)
			}
		}
	}
	for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
		for _, m := range c.VolumeMounts {
			if secretVolumes[m.Name] && !m.ReadOnly {
				t.Errorf("%s/%s: Secret volume %s mounted writable", d.Name, c.Name, m.Name)
			}
		}
		for _, e := range c.Env {
			switch {
			case e.Name == config.CodecKeyEnv || e.Name == config.APIKeyEnv:
				t.Errorf("%s/%s: %s in the environment; the key is a mounted file", d.Name, c.Name, e.Name)
			case e.ValueFrom == nil && e.Name != "HOME":
				t.Errorf("%s/%s: env %s is a literal value", d.Name, c.Name, e.Name)
			case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef == nil:
				t.Errorf("%s/%s: env %s from something other than a Secret", d.Name, c.Name, e.Name)
			}
		}
	}
	plain := mustJSON(t, []any{r.configMaps, r.deployments, r.services, r.ingresses, r.pdbs}) + r.notes
	for _, s := range secrets {
		if strings.Contains(plain, strings.TrimSpace(s)) {
			t.Errorf("a secret's text (%.6s...) is in an object other than a Secret", s)
		}
	}
}

func lintChart(t *testing.T, files []string) {
	t.Helper()
	vals := map[string]any{}
	for _, f := range files {
		v, err := common.ReadValuesFile(f)
		if err != nil {
			t.Fatal(err)
		}
		vals = v.AsMap()
	}
	res := lint.RunAll(chartDir, vals, namespace)
	for _, m := range res.Messages {
		if m.Severity >= support.WarningSev {
			t.Errorf("helm lint: %s", m)
		}
	}
}

func checkDefaults(t *testing.T, r *rendered, cfg *config.Config, client map[string]string) {
	d := r.deployment(t, fullname)
	want := map[string]any{
		"site": releaseName, "workers": 4, "interval": 5 * time.Minute, "loglevel": "info", "monitor_port": 8080,
		"jwt": true, "pki": false, "ed25519": false,
		"address": "temporal-frontend:7233", "namespace": "default", "task_queue": "choria-provisioner", "tls": false,
	}
	got := map[string]any{
		"site": cfg.Site, "workers": cfg.Workers, "interval": cfg.IntervalDuration, "loglevel": cfg.Loglevel, "monitor_port": cfg.MonitorPort,
		"jwt": cfg.Features.JWT, "pki": cfg.Features.PKI, "ed25519": cfg.Features.ED25519,
		"address": cfg.Temporal.Address, "namespace": cfg.Temporal.Namespace, "task_queue": cfg.Temporal.TaskQueue, "tls": cfg.Temporal.TLS.On(),
	}
	compare(t, got, want)
	if !strings.HasSuffix(cfg.JWTVerifyCert, "/etc/choria-provisioner/signer/signer.pem") || !strings.HasSuffix(cfg.Temporal.CodecKeyFile, "/codec/codec.key") {
		t.Errorf("jwt_verify_cert %s, codec_key_file %s: want the mounted Secrets", cfg.JWTVerifyCert, cfg.Temporal.CodecKeyFile)
	}
	if !strings.HasSuffix(cfg.HelperCommand[0], "/etc/choria-provisioner/helper/provision-helper") {
		t.Errorf("helper %v: want the helper ConfigMap's provision-helper", cfg.HelperCommand)
	}
	if client["plugin.security.provider"] != "file" || client["plugin.choria.middleware_hosts"] != "choria-broker:4222" {
		t.Errorf("client.cfg %v: want x509 (file) security to choria-broker:4222", client)
	}
	if cfg.Token != "" || cfg.BrokerProvisioningPassword != "" || len(r.secrets) != 0 {
		t.Errorf("no token or password in the values, yet token %q password %q, Secrets %v", cfg.Token, cfg.BrokerProvisioningPassword, keys(r.secrets))
	}
	tmpl := d.Spec.Template
	if tmpl.Annotations["prometheus.io/scrape"] != "true" || tmpl.Annotations["prometheus.io/port"] != "8080" {
		t.Errorf("pod annotations %v: want Prometheus to scrape port 8080", tmpl.Annotations)
	}
	if len(tmpl.Spec.InitContainers) != 1 || tmpl.Spec.InitContainers[0].Args[0] != "setup" {
		t.Errorf("init containers %v: want setup", tmpl.Spec.InitContainers)
	}
	if len(r.deployments) != 1 || len(r.services) != 1 || r.services[fullname+"-metrics"] == nil {
		t.Errorf("the defaults render Deployments %v and Services %v: want the provisioner and its metrics Service alone", keys(r.deployments), keys(r.services))
	}
}

func checkMutualTLS(t *testing.T, r *rendered, cfg *config.Config, client map[string]string) {
	tls := cfg.Temporal.TLS
	if !tls.On() || !strings.HasSuffix(tls.CertFile, "/temporal-tls/tls.crt") || !strings.HasSuffix(tls.KeyFile, "/temporal-tls/tls.key") ||
		!strings.HasSuffix(tls.CAFile, "/temporal-ca/ca.crt") || tls.ServerName != "temporal-frontend.temporal.svc.cluster.local" {
		t.Errorf("temporal.tls %+v: want mutual TLS from the mounted Secret", tls)
	}
	compare(t, map[string]any{
		"address": cfg.Temporal.Address, "namespace": cfg.Temporal.Namespace, "ed25519": cfg.Features.ED25519, "jwt": cfg.Features.JWT,
		"validity": cfg.ServerJWTValidityDuration, "workers": cfg.Workers, "site": cfg.Site, "monitor_port": cfg.MonitorPort,
		"helper_timeout": cfg.HelperTimeoutDuration, "helper_rate_limit": cfg.HelperRateLimit,
		"token": cfg.Token, "password": cfg.BrokerProvisioningPassword,
	}, map[string]any{
		"address": "temporal-frontend.temporal.svc.cluster.local:7233", "namespace": "provisioning", "ed25519": true, "jwt": true,
		"validity": 90 * 24 * time.Hour, "workers": 8, "site": "dc1", "monitor_port": 9464,
		"helper_timeout": 30 * time.Second, "helper_rate_limit": 10.0,
		"token": "provisioning-t0ken", "password": "broker-provisioning-s3cret",
	})
	if !strings.HasSuffix(cfg.JWTSigningKey, "/signing/signer.seed") || !strings.HasSuffix(cfg.JWTSigningToken, "/signing/signer.jwt") {
		t.Errorf("signer %s %s: want the mounted signer Secret", cfg.JWTSigningKey, cfg.JWTSigningToken)
	}
	if client["plugin.security.provider"] != "choria" || client["identity"] != "provisioner.choria" || client["plugin.security.choria.ca"] == "" {
		t.Errorf("client.cfg %v: want Choria JWT security as provisioner.choria", client)
	}
	if s := r.secrets[fullname+"-credentials"]; s == nil || string(s.Data["token"]) != "provisioning-t0ken" {
		t.Errorf("the token written in the values is not in the chart's Secret")
	}
	d := r.deployment(t, fullname)
	if args := d.Spec.Template.Spec.InitContainers[0].Args; args[len(args)-1] != "720h" {
		t.Errorf("setup %v: want --retention 720h", args)
	}
	checkCodecServer(t, r)
}

// checkCodecServer: the codec server loads its own configuration, which names the codec key
// alone, and its pod holds no other credential.
func checkCodecServer(t *testing.T, r *rendered) {
	t.Helper()
	d := r.deployment(t, fullname+"-codec-server")
	spec := d.Spec.Template.Spec
	c := container(t, spec.Containers, "codec-server")
	var secrets []string
	for _, v := range spec.Volumes {
		if v.Secret != nil {
			secrets = append(secrets, v.Secret.SecretName)
		}
	}
	if strings.Join(secrets, ",") != "provisioner-codec,provisioner-codec-token,provisioner-codec-server-tls" {
		t.Errorf("the codec server mounts Secrets %v: want the codec key, its token and its certificate only", secrets)
	}
	fx := fixtures{secrets: map[string]map[string][]byte{
		"provisioner-codec":       {"codec.key": []byte("0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0\n")},
		"provisioner-codec-token": {"token": []byte("0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0\n")}, "provisioner-codec-server-tls": {"tls.crt": nil, "tls.key": nil},
	}}
	p := mount(t, r, fx, spec, c)
	p.setenv(t)
	for _, f := range []string{"--token-file", "--tls-cert", "--tls-key"} {
		if _, err := os.Stat(p.host(t, arg(t, c, f))); err != nil {
			t.Errorf("codec-server %s: %v", f, err)
		}
	}
	// the secrets as mounted pass the codec server's permission check (codec.ReadToken, ServerTLS)
	for _, f := range []string{"--token-file", "--tls-key"} {
		if err := config.CheckKeyFile(p.host(t, arg(t, c, f))); err != nil {
			t.Errorf("codec-server %s as mounted: %v", f, err)
		}
	}
	for flag, want := range map[string]string{"--oidc-issuer": "https://idp.example.net/realms/ops", "--oidc-claim": "groups", "--oidc-claim-value": "temporal-operators"} {
		if got := arg(t, c, flag); got != want {
			t.Errorf("codec-server %s %q, want %q", flag, got, want)
		}
	}
	cfg, err := config.LoadForOperator(p.rebase(t, arg(t, c, "--config")))
	if err != nil {
		t.Fatalf("the codec server's configuration does not load: %v", err)
	}
	if cfg.Temporal.TLS.On() || cfg.Temporal.APIKeyFile != "" || cfg.JWTSigningKey != "" {
		t.Errorf("the codec server's configuration names credentials it does not use: %+v", cfg.Temporal)
	}
	if svc := r.services[d.Name]; svc == nil || svc.Spec.Ports[0].Name != "https" {
		t.Errorf("codec server Service %v: want https", svc)
	}
	if ing := r.ingresses[d.Name]; ing == nil || ing.Spec.Rules[0].Host != "codec.example.net" {
		t.Errorf("codec server Ingress %v: want codec.example.net", ing)
	}
}

func checkCloud(t *testing.T, r *rendered, cfg *config.Config, client map[string]string) {
	tls := cfg.Temporal.TLS
	if !tls.On() || tls.CAFile != "" || tls.CertFile != "" || !strings.HasSuffix(cfg.Temporal.APIKeyFile, "/temporal-api-key/api-key") {
		t.Errorf("temporal %+v: want TLS with the system's CAs and the mounted API key", cfg.Temporal)
	}
	compare(t, map[string]any{
		"address": cfg.Temporal.Address, "namespace": cfg.Temporal.Namespace, "pki": cfg.Features.PKI, "monitor_port": cfg.MonitorPort,
		"token": cfg.Token, "password": cfg.BrokerProvisioningPassword, "cache": cfg.Temporal.WorkflowCacheSize,
		"activities": cfg.Temporal.MaxConcurrentActivities, "pollers": cfg.Temporal.WorkflowPollers, "helper_args": strings.Join(cfg.HelperCommand[1:], " "),
	}, map[string]any{
		"address": "eu-west-1.aws.api.temporal.io:7233", "namespace": "provisioning.a1b2c", "pki": true, "monitor_port": 0,
		"token": "cloud-token", "password": "cloud-broker-password", "cache": 1000,
		"activities": 100, "pollers": 8, "helper_args": "--ca choria-ca",
	})
	if len(r.secrets) != 0 {
		t.Errorf("the site names its own Secrets, yet the chart renders %v", keys(r.secrets))
	}
	spec := r.deployment(t, fullname).Spec.Template.Spec
	if spec.ServiceAccountName != "choria-csraccess" || len(spec.Containers[0].Ports) != 1 || spec.Containers[0].Ports[0].Name != "health" {
		t.Errorf("want the pki service account and no metrics port (health alone): %s %v", spec.ServiceAccountName, spec.Containers[0].Ports)
	}
}

func compare(t *testing.T, got, want map[string]any) {
	t.Helper()
	for k, w := range want {
		if mustJSON(t, got[k]) != mustJSON(t, w) {
			t.Errorf("%s: %v, want %v", k, got[k], w)
		}
	}
}

// The chart refuses, before anything reaches the cluster, what would not run, naming the value.
func TestChartRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  map[string]any
		want string
	}{
		{"a key the chart does not have", map[string]any{"provisioner": map[string]any{"tokn": "x"}}, "tokn"},
		{"a secret in provisioner.config", map[string]any{"provisioner": map[string]any{"config": map[string]any{"token": "x"}}}, "provisioner.config.token"},
		{"an API key file in provisioner.config", map[string]any{"provisioner": map[string]any{"config": map[string]any{"temporal": map[string]any{"api_key_file": "/k"}}}}, "provisioner.config.temporal.api_key_file"},
		{"pki and ed25519", map[string]any{"pki": map[string]any{"enabled": true}, "ed25519": map[string]any{"enabled": true, "signerSecret": "s"}}, "exclude each other"},
		{"ed25519 without a signer", map[string]any{"ed25519": map[string]any{"enabled": true}}, "ed25519.signerSecret"},
		{"an API key without TLS", map[string]any{"temporal": map[string]any{"apiKey": map[string]any{"secret": "k"}}}, "only sent over TLS"},
		{"no codec key", map[string]any{"temporal": map[string]any{"codecKey": map[string]any{"secret": ""}}}, "temporal.codecKey.secret"},
		{"a codec server without its token", map[string]any{"codecServer": map[string]any{"enabled": true}}, "codecServer.tokenSecret"},
		{"codec server OIDC without a claim", map[string]any{"codecServer": map[string]any{"enabled": true, "tokenSecret": "t",
			"oidc": map[string]any{"issuer": "https://idp.example.net", "audience": "temporal-ui"}}}, "codecServer.oidc needs claim"},
		{"no broker credentials", map[string]any{"broker": map[string]any{"connectionSecret": ""}}, "broker.connectionSecret"},
		{"both broker credentials", map[string]any{"broker": map[string]any{"credentials": map[string]any{"secret": "c", "issuerPublicKey": strings.Repeat("ab", 32)}}}, "exclude each other"},
		{"an interval that is no duration", map[string]any{"provisioner": map[string]any{"interval": "often"}}, "interval"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := renderValues(t, tc.set)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("rendered (err %v), want an error naming %q", err, tc.want)
			}
		})
	}
}

// Where the platform assigns user and group (OpenShift), the rest of the hardening stays.
func TestChartHardenedWithoutFixedIDs(t *testing.T) {
	r := render(t, map[string]any{"securityContext": map[string]any{"enabled": false}, "replicas": 1})
	d := r.deployment(t, fullname)
	checkHardened(t, d)
	if sc := d.Spec.Template.Spec.SecurityContext; sc.RunAsUser != nil || sc.FSGroup != nil {
		t.Errorf("securityContext.enabled false, yet the pod fixes its IDs: %+v", sc)
	}
	if len(r.pdbs) != 0 {
		t.Error("one replica gets no PodDisruptionBudget (it would block every drain)")
	}
}
