package helm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// fixtures are the Secrets and ConfigMaps a site creates before installing: the chart names
// them, with the keys the values file's comments and docs/deployment.md list.
type fixtures struct {
	secrets    map[string]map[string][]byte
	configMaps map[string]map[string]string
}

// podView is what one container sees: its volumes laid out under root as a kubelet lays them
// out (only the projected keys, with their modes) and its environment with secretKeyRefs
// resolved.
type podView struct {
	root   string
	mounts []corev1.VolumeMount
	env    map[string]string
}

// mount lays out c's volumes; a Secret, ConfigMap or key the container needs that neither the
// release nor the site provides fails the test, as the pod would not start.
func mount(t *testing.T, r *rendered, fx fixtures, spec corev1.PodSpec, c corev1.Container) *podView {
	t.Helper()
	p := &podView{root: t.TempDir(), mounts: c.VolumeMounts, env: map[string]string{}}
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	for _, m := range c.VolumeMounts {
		v, ok := vols[m.Name]
		if !ok {
			t.Fatalf("container %s mounts volume %s, which the pod does not have", c.Name, m.Name)
		}
		dir := filepath.Join(p.root, m.MountPath)
		switch {
		case v.ConfigMap != nil:
			p.project(t, dir, "ConfigMap "+v.ConfigMap.Name, r.configMapData(t, fx, v.ConfigMap.Name), v.ConfigMap.Items, v.ConfigMap.DefaultMode)
		case v.Secret != nil:
			p.project(t, dir, "Secret "+v.Secret.SecretName, r.secretData(t, fx, v.Secret.SecretName), v.Secret.Items, v.Secret.DefaultMode)
		case v.EmptyDir != nil:
			if err := os.MkdirAll(dir, 0o750); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("volume %s is of a kind this test does not lay out", v.Name)
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			p.env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			b, ok := r.secretData(t, fx, ref.Name)[ref.Key]
			if !ok {
				t.Fatalf("env %s: Secret %s has no key %s", e.Name, ref.Name, ref.Key)
			}
			p.env[e.Name] = string(b)
		default:
			t.Fatalf("env %s: a source this test does not resolve", e.Name)
		}
	}
	return p
}

func (p *podView) project(t *testing.T, dir, what string, data map[string][]byte, items []corev1.KeyToPath, defaultMode *int32) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if len(items) == 0 {
		for k := range data {
			items = append(items, corev1.KeyToPath{Key: k, Path: k})
		}
	}
	for _, it := range items {
		b, ok := data[it.Key]
		if !ok {
			t.Fatalf("%s has no key %s: the pod would not start", what, it.Key)
		}
		mode := os.FileMode(0o644)
		if defaultMode != nil {
			mode = os.FileMode(*defaultMode)
		}
		if it.Mode != nil {
			mode = os.FileMode(*it.Mode)
		}
		if err := os.WriteFile(filepath.Join(dir, it.Path), b, mode); err != nil {
			t.Fatal(err)
		}
	}
}

func (r *rendered) configMapData(t *testing.T, fx fixtures, name string) map[string][]byte {
	t.Helper()
	src, ok := fx.configMaps[name]
	if cm, rendered := r.configMaps[name]; rendered {
		src, ok = cm.Data, true
	}
	if !ok {
		t.Fatalf("ConfigMap %s is neither in the release nor among the site's fixtures", name)
	}
	out := map[string][]byte{}
	for k, v := range src {
		out[k] = []byte(v)
	}
	return out
}

func (r *rendered) secretData(t *testing.T, fx fixtures, name string) map[string][]byte {
	t.Helper()
	if s, ok := r.secrets[name]; ok {
		return s.Data
	}
	if d, ok := fx.secrets[name]; ok {
		return d
	}
	t.Fatalf("Secret %s is neither in the release nor among the site's fixtures", name)
	return nil
}

// host is where the container's path is in this view; the path must be inside a mount.
func (p *podView) host(t *testing.T, path string) string {
	t.Helper()
	for _, m := range p.mounts {
		if path == m.MountPath || strings.HasPrefix(path, m.MountPath+"/") {
			return filepath.Join(p.root, path)
		}
	}
	t.Fatalf("%s is in no volume the container mounts", path)
	return ""
}

// rebase points the absolute paths in a mounted configuration file at this view, as the
// process in the pod would see them; a path outside every mount stays missing.
func (p *podView) rebase(t *testing.T, path string) string {
	t.Helper()
	file := p.host(t, path)
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.ReplaceAll(string(b), "/etc/choria-provisioner/", p.root+"/etc/choria-provisioner/")
	if err := os.WriteFile(file, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// setenv gives the test process exactly the container's PROVISIONER_ environment.
func (p *podView) setenv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "PROVISIONER_") {
			t.Setenv(name, "")
			if err := os.Unsetenv(name); err != nil {
				t.Fatal(err)
			}
		}
	}
	for k, v := range p.env {
		if k == "HOME" {
			v = filepath.Join(p.root, v)
		}
		t.Setenv(k, v)
	}
}

// arg is the value after flag in the container's arguments.
func arg(t *testing.T, c corev1.Container, flag string) string {
	t.Helper()
	for i, a := range c.Args {
		if a == flag && i+1 < len(c.Args) {
			return c.Args[i+1]
		}
	}
	t.Fatalf("container %s has no %s argument: %v", c.Name, flag, c.Args)
	return ""
}

// choriaConfig reads a Choria client configuration's key = value lines.
func choriaConfig(t *testing.T, file string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q is not key = value", file, line)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out
}
