package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/ivrsched/ivrsched/internal/app"
	"github.com/ivrsched/ivrsched/internal/kafkatest"
)

// The parts of Kubernetes objects the manifest test reads.
type k8sObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	Spec struct {
		ServiceName string `yaml:"serviceName"`
		Replicas    int    `yaml:"replicas"`
		Template    struct {
			Spec k8sPodSpec `yaml:"spec"`
		} `yaml:"template"`
		VolumeClaimTemplates []struct {
			Metadata struct {
				Name string `yaml:"name"`
			} `yaml:"metadata"`
		} `yaml:"volumeClaimTemplates"`
	} `yaml:"spec"`
}

type k8sPodSpec struct {
	Containers []k8sContainer `yaml:"containers"`
	Volumes    []struct {
		Name   string `yaml:"name"`
		Secret *struct {
			SecretName string `yaml:"secretName"`
			Items      []struct {
				Key  string `yaml:"key"`
				Path string `yaml:"path"`
			} `yaml:"items"`
		} `yaml:"secret"`
	} `yaml:"volumes"`
}

type k8sKeyRef struct {
	Name string `yaml:"name"`
	Key  string `yaml:"key"`
}

type k8sContainer struct {
	Name    string   `yaml:"name"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Env     []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			FieldRef *struct {
				FieldPath string `yaml:"fieldPath"`
			} `yaml:"fieldRef"`
			ConfigMapKeyRef *k8sKeyRef `yaml:"configMapKeyRef"`
			SecretKeyRef    *k8sKeyRef `yaml:"secretKeyRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	LivenessProbe  *k8sProbe `yaml:"livenessProbe"`
	ReadinessProbe *k8sProbe `yaml:"readinessProbe"`
	VolumeMounts   []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

type k8sProbe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"` // a number or a port name
	} `yaml:"httpGet"`
}

const manifest = "../../deploy/kubernetes.yaml"

func readManifest(t testing.TB, file string) []k8sObject { return decodeManifest[k8sObject](t, file) }

// decodeManifest decodes each document of file into a T.
func decodeManifest[T any](t testing.TB, file string) []T {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v", err)
	}
	var objs []T
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var o T
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		objs = append(objs, o)
	}
	return objs
}

var k8sVarRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// The sample Kubernetes manifest, checked against the binary's own flag
// parsing: every container's arguments parse (roleConfig, what the command
// runs); the probes ask /healthz and /readyz on the web server's port;
// every pod gets a volume of its own for --data-dir and its pod name as
// --instance-id; TLS files come from a Secret volume and SASL credentials
// from a Secret through the environment; no secret is in an argument.
func TestDeployManifest(t *testing.T) { checkManifestFile(t, manifest) }

func checkManifestFile(t testing.TB, file string) {
	t.Helper()
	objs := readManifest(t, file)
	certs, err := kafkatest.WriteCerts(t.TempDir())
	if err != nil {
		t.Fatalf("%v", err)
	}
	configMaps, services := map[string]map[string]string{}, map[string]bool{}
	for _, o := range objs {
		switch o.Kind {
		case "ConfigMap":
			configMaps[o.Metadata.Name] = o.Data
		case "Service":
			services[o.Metadata.Name] = true
		}
	}
	roles := map[string]bool{}
	instanceIDs := map[string]string{}
	for _, o := range objs {
		if o.Kind != "StatefulSet" {
			continue
		}
		sts := o.Metadata.Name
		if !services[o.Spec.ServiceName] {
			t.Errorf("%s: serviceName %q is not a Service of the manifest", sts, o.Spec.ServiceName)
		}
		if o.Spec.Replicas < 2 {
			t.Errorf("%s: %d replicas; the sample should show several instances", sts, o.Spec.Replicas)
		}
		claims := map[string]bool{}
		for _, c := range o.Spec.VolumeClaimTemplates {
			claims[c.Metadata.Name] = true
		}
		pod := o.Spec.Template.Spec
		if len(pod.Containers) != 1 {
			t.Fatalf("%s: %d containers, want 1", sts, len(pod.Containers))
		}
		c := pod.Containers[0]
		if len(c.Command) > 0 {
			t.Errorf("%s: command %v overrides the image's ivrsched entry point", sts, c.Command)
		}
		for ordinal := range 2 {
			podName := fmt.Sprintf("%s-%d", sts, ordinal)
			cfg, role := checkContainer(t, podName, c, pod, claims, configMaps, certs)
			if cfg == nil {
				continue
			}
			roles[role] = true
			if other, dup := instanceIDs[cfg.Kafka.InstanceID]; dup {
				t.Errorf("%s and %s share --instance-id %q", other, podName, cfg.Kafka.InstanceID)
			}
			instanceIDs[cfg.Kafka.InstanceID] = podName
		}
	}
	if !roles["scheduler"] || !roles["dialer"] {
		t.Errorf("the manifest runs roles %v; want the scheduler and the dialer", roles)
	}
	checkManifestSecurity(t, file)
}

// checkContainer checks the container of one pod and returns the
// configuration its arguments parse to, and its role.
func checkContainer(t testing.TB, podName string, c k8sContainer, pod k8sPodSpec, claims map[string]bool,
	configMaps map[string]map[string]string, certs kafkatest.Certs) (*app.Config, string) {
	t.Helper()
	// The environment as the kubelet sets it; secrets get stand-in values.
	env, secretVars := map[string]string{}, map[string]bool{}
	for _, e := range c.Env {
		switch vf := e.ValueFrom; {
		case vf == nil:
			env[e.Name] = e.Value
			if sensitive(e.Name) {
				t.Errorf("%s: $%s is a literal value; want it from a Secret (secretKeyRef)", podName, e.Name)
			}
		case vf.FieldRef != nil && vf.FieldRef.FieldPath == "metadata.name":
			env[e.Name] = podName
		case vf.ConfigMapKeyRef != nil:
			v, ok := configMaps[vf.ConfigMapKeyRef.Name][vf.ConfigMapKeyRef.Key]
			if !ok {
				t.Errorf("%s: $%s from ConfigMap %s key %s, which the manifest does not have", podName, e.Name, vf.ConfigMapKeyRef.Name, vf.ConfigMapKeyRef.Key)
			}
			env[e.Name] = v
		case vf.SecretKeyRef != nil:
			env[e.Name] = "from-secret-" + vf.SecretKeyRef.Name + "-" + vf.SecretKeyRef.Key
			secretVars[e.Name] = true
		default:
			t.Errorf("%s: $%s has a valueFrom this test does not know", podName, e.Name)
		}
	}
	// The arguments as the kubelet expands them.
	args := make([]string, len(c.Args))
	for i, a := range c.Args {
		args[i] = k8sVarRef.ReplaceAllStringFunc(a, func(ref string) string {
			name := ref[2 : len(ref)-1]
			if secretVars[name] {
				t.Errorf("%s: argument %q puts the secret $%s in the process list; pass it in the environment or a file", podName, a, name)
			}
			v, ok := env[name]
			if !ok {
				t.Errorf("%s: argument %q refers to $%s, which the container does not define", podName, a, name)
			}
			return v
		})
		for name := range secretVars {
			if strings.Contains(args[i], env[name]) {
				t.Errorf("%s: argument %q holds a secret", podName, a)
			}
		}
	}
	if len(args) == 0 {
		t.Errorf("%s: no arguments", podName)
		return nil, ""
	}
	// TLS files must be items of a Secret volume; the test puts its own
	// certificates there.
	mounts := map[string]string{} // mount path → volume name
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	secretItem := func(file string) bool {
		vol := mounts[path.Dir(file)]
		for _, v := range pod.Volumes {
			if v.Name == vol && v.Secret != nil {
				for _, it := range v.Secret.Items {
					if it.Path == path.Base(file) {
						return true
					}
				}
			}
		}
		return false
	}
	local := map[string]string{"tls-ca": certs.CA, "tls-cert": certs.ClientCert, "tls-key": certs.ClientKey}
	for i, a := range args {
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if file, isTLS := local[name]; ok && isTLS {
			if !secretItem(value) {
				t.Errorf("%s: --%s %s is not an item of a Secret volume mounted there", podName, name, value)
			}
			args[i] = "--" + name + "=" + file
		}
	}
	for k, v := range env {
		t.Setenv(k, v)
	}

	role := args[0]
	var roles app.Roles
	switch role {
	case "scheduler":
		roles.Scheduler = true
	case "dialer":
		roles.Dialer = true
	default:
		t.Errorf("%s: command %q; want scheduler or dialer", podName, role)
		return nil, ""
	}
	cfg, err := roleConfig(role, args[1:], roles)
	if err != nil {
		t.Errorf("%s: ivrsched %s rejects the manifest's arguments: %v", podName, strings.Join(args, " "), err)
		return nil, ""
	}

	if cfg.Kafka.InstanceID != podName {
		t.Errorf("%s: --instance-id is %q, want the pod name", podName, cfg.Kafka.InstanceID)
	}
	if claim := mounts[cfg.DataDir]; !claims[claim] {
		t.Errorf("%s: --data-dir %s is not a volume claim template's mount (one volume per pod); it is on %q", podName, cfg.DataDir, claim)
	}
	sec := cfg.Kafka.Security
	if sec.TLS == nil || sec.TLS.RootCAs == nil || len(sec.TLS.Certificates) != 1 {
		t.Errorf("%s: TLS not configured with the Secret's CA and client certificate", podName)
	}
	if sec.SASL.Mechanism == "" || !strings.HasPrefix(sec.SASL.User, "from-secret-") || !strings.HasPrefix(sec.SASL.Password, "from-secret-") {
		t.Errorf("%s: SASL %+v; want a mechanism with the credentials from a Secret", podName, sec.SASL)
	}
	// Each listener flag has a container port named for its purpose, the
	// name the NetworkPolicy and the probes use.
	ports := map[string]string{} // port name → number
	for _, p := range c.Ports {
		ports[p.Name] = strconv.Itoa(p.ContainerPort)
	}
	for _, l := range []struct{ flag, addr, port string }{
		{"http", cfg.HTTP, metricsPort},
		{"admin-http", cfg.AdminHTTP, adminPort},
		{"callback-http", cfg.CallbackHTTP, callbacksPort},
	} {
		if l.addr == "" {
			continue
		}
		_, num, err := net.SplitHostPort(l.addr)
		if err != nil {
			t.Errorf("%s: --%s %q: %v", podName, l.flag, l.addr, err)
			continue
		}
		if ports[l.port] != num {
			t.Errorf("%s: --%s listens on port %s, but the container port named %q is %q (%v): the NetworkPolicy and the probes name the port by purpose", podName, l.flag, num, l.port, ports[l.port], c.Ports)
		}
	}
	if cfg.HTTP == "" {
		t.Errorf("%s: no --http: the probes have no listener", podName)
	}
	if cfg.AdminHTTP != "" {
		if cfg.AdminHTTP == cfg.HTTP {
			t.Errorf("%s: the admin listener shares --http's %s, which the NetworkPolicy opens to the monitoring namespace; give it --admin-http", podName, cfg.HTTP)
		}
		if cfg.AdminToken == "" {
			t.Errorf("%s: an admin listener without the admin token", podName)
		}
	}
	if (cfg.TwilioCallback != nil || cfg.WebhookCallback != nil) != (cfg.CallbackHTTP != "") {
		t.Errorf("%s: --callback-http %q, but status callbacks expected: %v (--public-url)", podName, cfg.CallbackHTTP, cfg.TwilioCallback != nil || cfg.WebhookCallback != nil)
	}
	_, httpPort, _ := net.SplitHostPort(cfg.HTTP)
	for _, p := range []struct {
		kind  string
		probe *k8sProbe
		path  string
	}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s: no HTTP %s probe", podName, p.kind)
			continue
		}
		if got := p.probe.HTTPGet.Path; got != p.path {
			t.Errorf("%s: %s probe asks %s, want %s", podName, p.kind, got, p.path)
		}
		if port := fmt.Sprint(p.probe.HTTPGet.Port); port != metricsPort || ports[port] != httpPort {
			t.Errorf("%s: %s probe on port %s, want the port named %s (--http's %s)", podName, p.kind, port, metricsPort, httpPort)
		}
	}
	return &cfg, role
}

// sensitive reports an environment variable that should come from a
// Secret.
func sensitive(name string) bool {
	n := strings.ToUpper(name)
	return strings.Contains(n, "PASSWORD") || strings.Contains(n, "SECRET") || strings.Contains(n, "TOKEN") || strings.Contains(n, "SASL_USERNAME")
}

// The manifest test fails on what it must catch: a secret in an argument,
// a shared data directory, a missing instance id, a probe on the wrong
// path, a flag the binary does not know; a listener without its named
// port, a Service's target port no container has; an image by tag, a pod with
// capabilities or an API token, a port let in that should not be, one
// Kafka principal for both roles, an ACL missing.
func TestDeployManifestCatchesMistakes(t *testing.T) {
	data, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct {
		name, old, new string
	}{
		{"password in args", "- --sasl-mechanism=SCRAM-SHA-512\n", "- --sasl-mechanism=SCRAM-SHA-512\n            - --webhook-url=https://x/$(IVRSCHED_SASL_PASSWORD)\n"},
		{"no instance id", "            - --instance-id=$(POD_NAME)\n", ""},
		{"shared data dir", "--data-dir=/var/lib/ivrsched", "--data-dir=/tmp/shared"},
		{"readiness on /healthz", "path: /readyz", "path: /healthz"},
		{"unknown flag", "--partitions=24", "--partition-count=24"},
		{"literal password", "            - name: IVRSCHED_SASL_PASSWORD\n              valueFrom:\n                secretKeyRef:\n                  name: ivrsched-kafka-scheduler\n                  key: password\n",
			"            - name: IVRSCHED_SASL_PASSWORD\n              value: hunter2\n"},
		{"CA outside the Secret", "--tls-ca=/etc/ivrsched/kafka/ca.crt", "--tls-ca=/etc/ssl/ca.crt"},
		// checkManifestSecurity's
		{"image by tag", "@sha256:", ":latest@sha256:"},
		{"image unpinned", "@sha256:", ":v1#"},
		{"service account token", "automountServiceAccountToken: false", "automountServiceAccountToken: true"},
		{"capabilities kept", "drop: [ALL]", "drop: [NET_RAW]"},
		{"no seccomp", "type: RuntimeDefault", "type: Unconfined"},
		{"admin port opened", "- port: " + callbacksPort, "- port: admin"},
		{"metrics from anywhere", namespaceLabel + ": " + monitoringNS, namespaceLabel + ": default"},
		// the listeners' named ports
		{"probes' port renamed", "            - name: metrics\n              containerPort: 9095\n", "            - name: http\n              containerPort: 9095\n"},
		{"callbacks port missing", "            - name: callbacks\n              containerPort: 9097\n", ""},
		{"callbacks port wrong", "--callback-http=0.0.0.0:9097", "--callback-http=0.0.0.0:9098"},
		{"admin on the metrics port", "            - --admin-http=0.0.0.0:9096\n", ""},
		{"service to no port", "targetPort: admin", "targetPort: admn"},
		{"one principal", "name: ivrsched-kafka-dialer", "name: ivrsched-kafka-scheduler"},
		{"an ACL missing", "Topic  ivr-calls", "Topic  ivr-callz"},
	} {
		if !bytes.Contains(data, []byte(m.old)) {
			t.Fatalf("%s: the manifest no longer has %q", m.name, m.old)
		}
		dir := t.TempDir()
		p := filepath.Join(dir, "kubernetes.yaml")
		if err := os.WriteFile(p, bytes.Replace(data, []byte(m.old), []byte(m.new), 1), 0o644); err != nil {
			t.Fatal(err)
		}
		if failed, why := runManifestCheck(t, p); !failed {
			t.Errorf("%s: the manifest test passed a broken manifest", m.name)
		} else {
			t.Logf("%s: %s", m.name, why)
		}
	}
}

// runManifestCheck runs TestDeployManifest's checks on another file and
// reports whether they failed, and the first failure.
func runManifestCheck(t *testing.T, file string) (failed bool, first string) {
	t.Helper()
	ft := &fakeT{TB: t}
	func() {
		defer func() {
			if r := recover(); r != nil && r != errFakeFatal {
				panic(r)
			}
		}()
		checkManifestFile(ft, file)
	}()
	return ft.failed, ft.first
}

// fakeT records failures instead of failing the test it wraps.
type fakeT struct {
	testing.TB
	failed bool
	first  string
}

var errFakeFatal = errors.New("fatal")

func (f *fakeT) Errorf(format string, args ...any) {
	if !f.failed {
		f.first = fmt.Sprintf(format, args...)
	}
	f.failed = true
}

func (f *fakeT) Fatalf(format string, args ...any) {
	f.Errorf(format, args...)
	panic(errFakeFatal)
}
