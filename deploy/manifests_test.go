// Package deploy holds the container image definition and the Kubernetes
// manifests; this test validates the manifests.
package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/cistern-ebpf/cistern/query/exporter"
)

// TestManifests decodes every manifest strictly into the Kubernetes API's
// own types (an unknown or misspelt field, or a wrong type, fails), checks
// what the node agent needs (hostPID, the BPF, tracefs, cgroup and BTF
// mounts, capabilities, the metrics port and its Prometheus annotations),
// compiles the exporter's queries and parses every container's command
// line with the cistern binary itself.
func TestManifests(t *testing.T) {
	ds, cm := loadManifests(t)
	spec := ds.Spec.Template.Spec
	if !spec.HostPID {
		t.Error("hostPID: capture --pid/--all must see the node's processes")
	}
	if a := ds.Spec.Template.Annotations; a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != "9435" {
		t.Errorf("prometheus annotations %v", a)
	}
	if sel := ds.Spec.Selector.MatchLabels; sel["app.kubernetes.io/name"] != ds.Spec.Template.Labels["app.kubernetes.io/name"] {
		t.Error("the selector does not match the pod's labels")
	}
	vols := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			vols[v.Name] = v.HostPath.Path
		}
	}
	for _, p := range []string{"/sys/fs/bpf", "/sys/kernel/tracing", "/sys/kernel/btf", "/sys/fs/cgroup"} {
		found := false
		for _, hp := range vols {
			found = found || hp == p
		}
		if !found {
			t.Errorf("no hostPath volume for %s", p)
		}
	}
	bin := filepath.Join(t.TempDir(), "cistern")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/cistern").CombinedOutput(); err != nil {
		t.Fatalf("build cistern: %v\n%s", err, out)
	}
	for _, c := range spec.Containers {
		caps := map[corev1.Capability]bool{}
		for _, cp := range c.SecurityContext.Capabilities.Add {
			caps[cp] = true
		}
		if (!caps["BPF"] || !caps["PERFMON"]) && !caps["SYS_ADMIN"] { // SYS_ADMIN covers both
			t.Errorf("%s: capabilities %v lack BPF and PERFMON, or SYS_ADMIN", c.Name, c.SecurityContext.Capabilities.Add)
		}
		for _, m := range c.VolumeMounts {
			if _, ok := vols[m.Name]; !ok && m.Name != "config" {
				t.Errorf("%s mounts %s, which is no volume", c.Name, m.Name)
			}
		}
		// The binary parses the arguments (unknown flags are errors).
		if out, err := exec.Command(bin, append(append([]string{}, c.Args...), "--help")...).CombinedOutput(); err != nil {
			t.Errorf("%s: cistern %s: %v\n%s", c.Name, strings.Join(c.Args, " "), err, out)
		}
	}
	// The exporter's configuration loads and every query compiles.
	f := filepath.Join(t.TempDir(), "exporter.yaml")
	os.WriteFile(f, []byte(cm.Data["exporter.yaml"]), 0o644)
	cfg, err := exporter.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exporter.New(*cfg); err != nil {
		t.Fatalf("exporter config: %v", err)
	}
}

// loadManifests decodes kubernetes/*.yaml strictly: the DaemonSet and the
// exporter's ConfigMap.
func loadManifests(t *testing.T) (*appsv1.DaemonSet, *corev1.ConfigMap) {
	t.Helper()
	files, _ := filepath.Glob("kubernetes/*.yaml")
	if len(files) == 0 {
		t.Fatal("no manifests")
	}
	var ds *appsv1.DaemonSet
	var cm *corev1.ConfigMap
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range bytes.Split(b, []byte("\n---")) {
			var meta struct{ APIVersion, Kind string }
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				t.Fatalf("%s #%d: %v", f, i, err)
			}
			var obj any
			switch meta.APIVersion + "/" + meta.Kind {
			case "apps/v1/DaemonSet":
				ds = &appsv1.DaemonSet{}
				obj = ds
			case "v1/ConfigMap":
				cm = &corev1.ConfigMap{}
				obj = cm
			case "v1/Namespace":
				obj = &corev1.Namespace{}
			default:
				t.Fatalf("%s #%d: unexpected %s %s", f, i, meta.APIVersion, meta.Kind)
			}
			if err := yaml.UnmarshalStrict(doc, obj); err != nil {
				t.Fatalf("%s #%d (%s): %v", f, i, meta.Kind, err)
			}
		}
	}
	if ds == nil || cm == nil {
		t.Fatal("want a DaemonSet and the exporter's ConfigMap")
	}
	return ds, cm
}
