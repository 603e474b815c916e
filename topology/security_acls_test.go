package topology_test

import (
	"slices"
	"testing"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/storage"

	"github.com/ivrsched/ivrsched/processors/dialer"
	"github.com/ivrsched/ivrsched/processors/scheduler"
	"github.com/ivrsched/ivrsched/topology"
)

// Each role's ACLs allow what its processor's graph does (Read on its
// group, inputs, loop and table; Write on its outputs, loop and table)
// and what the role does beside it, so an edge added to a graph without
// its ACL fails here; the other role's group and table are not its own.
func TestRoleACLsCoverTheGraphs(t *testing.T) {
	tp := topology.NewTopics("p-")
	s, err := scheduler.New(scheduler.Config{Topics: tp, Partitions: 1, Storage: storage.MemoryBuilder()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := dialer.New(dialer.Config{Topics: tp, Placer: struct{ dialer.Placer }{}, Loop: struct{ dialer.Emitter }{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		role   string
		graph  *goka.GroupGraph
		beside map[string][]string // topic → operations outside the graph
	}{
		{topology.RoleScheduler, s.Graph(), map[string][]string{string(tp.Ticks): {"Write"}, string(tp.Policies): {"Read"}, string(tp.Suppressions): {"Read"}}},
		{topology.RoleDialer, d.Graph(), map[string][]string{string(tp.DialerLoop()): {"Write"}, string(tp.Policies): {"Read"}, string(tp.Suppressions): {"Read"}}},
	} {
		acls := tp.RoleACLs(c.role)
		allowed := func(resource, name, op string) bool {
			for _, a := range acls {
				if a.Resource != resource || a.Name != name {
					continue
				}
				if slices.Contains(a.Operations, op) || (op == "Describe" && (slices.Contains(a.Operations, "Read") || slices.Contains(a.Operations, "Write"))) {
					return true
				}
			}
			return false
		}
		need := func(resource, name string, ops ...string) {
			for _, op := range ops {
				if !allowed(resource, name, op) {
					t.Errorf("%s: no %s on %s %s", c.role, op, resource, name)
				}
			}
		}
		g := c.graph
		need("Group", string(g.Group()), "Read")
		for _, e := range g.InputStreams() {
			need("Topic", e.Topic(), "Read")
		}
		for _, e := range append(g.LookupTables(), g.JointTables()...) {
			need("Topic", e.Topic(), "Read")
		}
		for _, e := range g.OutputStreams() {
			need("Topic", e.Topic(), "Write")
		}
		for _, e := range []goka.Edge{g.LoopStream(), g.GroupTable()} {
			need("Topic", e.Topic(), "Read", "Write")
		}
		for topic, ops := range c.beside {
			need("Topic", topic, ops...)
		}
		for _, spec := range tp.Specs() {
			need("Topic", spec.Name, "Describe")
			if spec.Compact {
				need("Topic", spec.Name, "DescribeConfigs")
			}
		}
		other := map[string]goka.Group{topology.RoleScheduler: tp.Dialer, topology.RoleDialer: tp.Scheduler}[c.role]
		if allowed("Group", string(other), "Read") || allowed("Topic", string(goka.GroupTable(other)), "Write") {
			t.Errorf("%s may read the group or write the table of %s", c.role, other)
		}
	}
	if tp.RoleACLs("operator") != nil {
		t.Error("RoleACLs of an unknown role is not nil")
	}
}
