package main

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ivrsched/ivrsched/topology"
)

// The parts of Kubernetes objects the manifest's security checks read.
type k8sSecured struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec struct {
		// NetworkPolicy
		PodSelector k8sSelector `yaml:"podSelector"`
		PolicyTypes []string    `yaml:"policyTypes"`
		Ingress     []struct {
			From  []k8sPeer `yaml:"from"`
			Ports []struct {
				Port any `yaml:"port"` // a number or a port name
			} `yaml:"ports"`
		} `yaml:"ingress"`
		// Service
		Selector map[string]any `yaml:"selector"` // a StatefulSet's holds matchLabels
		Ports    []struct {
			Name       string `yaml:"name"`
			TargetPort any    `yaml:"targetPort"` // a number or a port name
		} `yaml:"ports"`
		// StatefulSet
		Template struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec struct {
				AutomountServiceAccountToken *bool              `yaml:"automountServiceAccountToken"`
				SecurityContext              k8sSecurityContext `yaml:"securityContext"`
				Containers                   []struct {
					Name            string             `yaml:"name"`
					Image           string             `yaml:"image"`
					SecurityContext k8sSecurityContext `yaml:"securityContext"`
					Ports           []struct {
						Name string `yaml:"name"`
					} `yaml:"ports"`
					Env []struct {
						Name      string `yaml:"name"`
						ValueFrom *struct {
							SecretKeyRef *k8sKeyRef `yaml:"secretKeyRef"`
						} `yaml:"valueFrom"`
					} `yaml:"env"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type k8sSelector struct {
	MatchLabels map[string]string `yaml:"matchLabels"`
}

type k8sPeer struct {
	NamespaceSelector *k8sSelector `yaml:"namespaceSelector"`
	PodSelector       *k8sSelector `yaml:"podSelector"`
	IPBlock           *struct {
		CIDR string `yaml:"cidr"`
	} `yaml:"ipBlock"`
}

type k8sSecurityContext struct {
	RunAsNonRoot             *bool `yaml:"runAsNonRoot"`
	AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
	ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
	Capabilities             struct {
		Drop []string `yaml:"drop"`
	} `yaml:"capabilities"`
	SeccompProfile *struct {
		Type string `yaml:"type"`
	} `yaml:"seccompProfile"`
}

// The purposes of the listeners a NetworkPolicy may open, by container
// port name: the providers' status callbacks (from the ingress
// controller) and the probes and metrics (from the monitoring
// namespace). The admin listener gets no rule (kubectl port-forward).
// checkContainer checks that each listener flag has its port.
const (
	callbacksPort  = "callbacks"
	metricsPort    = "metrics"
	adminPort      = "admin"
	monitoringNS   = "monitoring"
	namespaceLabel = "kubernetes.io/metadata.name"
)

var (
	imageDigest = regexp.MustCompile(`@sha256:[0-9a-f]{64}$`)
	// aclLine is one line of the manifest's list of Kafka ACLs:
	// "#   acl ROLE PRINCIPAL Topic|Group NAME OP,OP...".
	aclLine = regexp.MustCompile(`(?m)^#\s+acl\s+(\S+)\s+(\S+)\s+(Topic|Group)\s+(\S+)\s+(\S+)\s*$`)
)

// checkManifestSecurity, part of TestDeployManifest, checks that the
// manifest is locked down: pods without a service account token, with
// every capability dropped, the RuntimeDefault seccomp profile, no
// privilege escalation; images pinned by digest; a NetworkPolicy that
// lets in only the status callbacks (from the ingress controller) and
// the metrics (from the monitoring namespace); and for each role a Kafka
// principal of its own, whose listed ACLs are topology.RoleACLs.
func checkManifestSecurity(t testing.TB, file string) {
	t.Helper()
	objs := decodeManifest[k8sSecured](t, file)
	data, err := os.ReadFile(file) // the ACLs are comments
	if err != nil {
		t.Fatalf("%v", err)
	}
	principals := map[string]string{}    // role → principal of its ACLs
	saslSecrets := map[string][]string{} // Secret of the SASL user name → roles
	var policies, services []k8sSecured
	podLabels := map[string]map[string]string{}
	podPorts := map[string][]string{} // workload → its containers' port names
	for _, o := range objs {
		switch o.Kind {
		case "NetworkPolicy":
			policies = append(policies, o)
			continue
		case "Service":
			services = append(services, o)
			continue
		case "StatefulSet", "Deployment", "DaemonSet", "Job", "CronJob":
		default:
			continue
		}
		name, pod := o.Metadata.Name, o.Spec.Template.Spec
		podLabels[name] = o.Spec.Template.Metadata.Labels
		if a := pod.AutomountServiceAccountToken; a == nil || *a {
			t.Errorf("%s: automountServiceAccountToken is not false: the pods would get an API token they do not need", name)
		}
		if p := pod.SecurityContext.RunAsNonRoot; p == nil || !*p {
			t.Errorf("%s: runAsNonRoot is not true", name)
		}
		for _, c := range pod.Containers {
			for _, p := range c.Ports {
				podPorts[name] = append(podPorts[name], p.Name)
			}
			sc := c.SecurityContext
			if !slices.Contains(sc.Capabilities.Drop, "ALL") {
				t.Errorf("%s/%s: capabilities.drop %v; want [ALL]", name, c.Name, sc.Capabilities.Drop)
			}
			seccomp := pod.SecurityContext.SeccompProfile
			if sc.SeccompProfile != nil {
				seccomp = sc.SeccompProfile
			}
			if seccomp == nil || seccomp.Type != "RuntimeDefault" {
				t.Errorf("%s/%s: no RuntimeDefault seccomp profile", name, c.Name)
			}
			if p := sc.AllowPrivilegeEscalation; p == nil || *p {
				t.Errorf("%s/%s: allowPrivilegeEscalation is not false", name, c.Name)
			}
			if p := sc.ReadOnlyRootFilesystem; p == nil || !*p {
				t.Errorf("%s/%s: readOnlyRootFilesystem is not true", name, c.Name)
			}
			if ref, _, _ := strings.Cut(c.Image, "@"); !imageDigest.MatchString(c.Image) || strings.HasSuffix(ref, ":latest") {
				t.Errorf("%s/%s: image %q is not pinned by digest (@sha256:<64 hex>); a tag such as :latest can change under the pods", name, c.Name, c.Image)
			}
			for _, e := range c.Env {
				if e.Name == envSASLUsername && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					role := strings.TrimPrefix(name, "ivrsched-")
					saslSecrets[e.ValueFrom.SecretKeyRef.Name] = append(saslSecrets[e.ValueFrom.SecretKeyRef.Name], role)
				}
			}
		}
	}
	for secret, roles := range saslSecrets {
		if len(roles) > 1 {
			t.Errorf("%v take their SASL user from one Secret, %s: want a principal per role", roles, secret)
		}
	}
	checkNetworkPolicies(t, policies, podLabels, podPorts)
	checkServicePorts(t, services, podLabels, podPorts)

	// The ACLs listed in the header, against the topology's.
	got := map[string][]topology.ACL{}
	for _, m := range aclLine.FindAllStringSubmatch(string(data), -1) {
		role, principal := m[1], m[2]
		if p, ok := principals[role]; ok && p != principal {
			t.Errorf("ACLs of role %s for two principals, %s and %s", role, p, principal)
		}
		principals[role] = principal
		ops := strings.Split(m[5], ",")
		slices.Sort(ops)
		got[role] = append(got[role], topology.ACL{Resource: m[3], Name: m[4], Operations: ops})
	}
	tp := topology.NewTopics("")
	for _, role := range []string{topology.RoleScheduler, topology.RoleDialer} {
		want := tp.RoleACLs(role)
		if a, b := aclStrings(got[role]), aclStrings(want); !slices.Equal(a, b) {
			t.Errorf("the manifest's ACLs of the %s differ from topology.RoleACLs:\n listed: %v\n want:   %v", role, a, b)
		}
	}
	if p := principals[topology.RoleScheduler]; p == "" || p == principals[topology.RoleDialer] {
		t.Errorf("principals %v: want one of its own for the scheduler and the dialer", principals)
	}
}

// checkNetworkPolicies checks that a NetworkPolicy selects every
// workload's pods, and that every rule lets in only the status callbacks
// or, from the monitoring namespace, the metrics, by port name, a name
// that a container of the pods it selects has (a name no container has
// lets nothing in, silently).
func checkNetworkPolicies(t testing.TB, policies []k8sSecured, podLabels map[string]map[string]string, podPorts map[string][]string) {
	t.Helper()
	for name, labels := range podLabels {
		covered := false
		for _, p := range policies {
			if selects(p.Spec.PodSelector, labels) && slices.Contains(p.Spec.PolicyTypes, "Ingress") {
				covered = true
			}
		}
		if !covered {
			t.Errorf("%s: no NetworkPolicy limits what reaches its pods", name)
		}
	}
	callbacks := false
	for _, p := range policies {
		for i, r := range p.Spec.Ingress {
			where := fmt.Sprintf("NetworkPolicy %s, ingress rule %d", p.Metadata.Name, i)
			if len(r.From) == 0 || len(r.Ports) == 0 {
				t.Errorf("%s: lets in from anywhere or to any port; want peers and named ports", where)
				continue
			}
			for _, port := range r.Ports {
				name, ok := port.Port.(string)
				if ok && !portNamed(p.Spec.PodSelector.MatchLabels, name, podLabels, podPorts) {
					t.Errorf("%s: port %q is no container port of the pods it selects", where, name)
				}
				switch {
				case !ok:
					t.Errorf("%s: port %v by number; want a container port's name by purpose (%s, %s)", where, port.Port, callbacksPort, metricsPort)
				case name == callbacksPort:
					callbacks = true
				case name == metricsPort:
					for _, from := range r.From {
						if ns := from.NamespaceSelector; ns == nil || ns.MatchLabels[namespaceLabel] != monitoringNS {
							t.Errorf("%s: the metrics port open to %+v; want the %s namespace only", where, from, monitoringNS)
						}
					}
				default:
					t.Errorf("%s: lets in port %q; want only %s (from the ingress controller) and %s (from the %s namespace)", where, name, callbacksPort, metricsPort, monitoringNS)
				}
			}
			for _, from := range r.From {
				if from.IPBlock != nil || (from.NamespaceSelector != nil && len(from.NamespaceSelector.MatchLabels) == 0) {
					t.Errorf("%s: peer %+v is not one namespace's", where, from)
				}
			}
		}
	}
	if !callbacks {
		t.Errorf("no NetworkPolicy lets the ingress controller reach the %s port", callbacksPort)
	}
}

// checkServicePorts checks that every Service's targetPort is a port that
// a container of the pods it selects has.
func checkServicePorts(t testing.TB, services []k8sSecured, podLabels map[string]map[string]string, podPorts map[string][]string) {
	t.Helper()
	for _, s := range services {
		for _, p := range s.Spec.Ports {
			name, ok := p.TargetPort.(string)
			if !ok {
				t.Errorf("Service %s, port %s: targetPort %v by number; want a container port's name", s.Metadata.Name, p.Name, p.TargetPort)
				continue
			}
			selector := map[string]string{}
			for k, v := range s.Spec.Selector {
				selector[k] = fmt.Sprint(v)
			}
			if !portNamed(selector, name, podLabels, podPorts) {
				t.Errorf("Service %s, port %s: targetPort %q is no container port of the pods it selects", s.Metadata.Name, p.Name, name)
			}
		}
	}
}

// portNamed reports whether a workload whose pods selector selects has a
// container port of that name.
func portNamed(selector map[string]string, name string, podLabels map[string]map[string]string, podPorts map[string][]string) bool {
	for w, labels := range podLabels {
		if selects(k8sSelector{MatchLabels: selector}, labels) && slices.Contains(podPorts[w], name) {
			return true
		}
	}
	return false
}

func selects(s k8sSelector, labels map[string]string) bool {
	for k, v := range s.MatchLabels {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func aclStrings(acls []topology.ACL) []string {
	out := make([]string, 0, len(acls))
	for _, a := range acls {
		out = append(out, a.Resource+" "+a.Name+" "+strings.Join(a.Operations, ","))
	}
	slices.Sort(out)
	return out
}
