package topology

import (
	"slices"
	"sort"
)

// ACL is what a role's Kafka principal must be allowed on one resource:
// Kafka's operation names (Read, Write, Describe, DescribeConfigs) on a
// topic or a consumer group of a literal name. Describe is left out where
// Read or Write, which imply it, are given.
type ACL struct {
	Resource   string // "Topic" or "Group"
	Name       string
	Operations []string // sorted
}

// The roles RoleACLs knows.
const (
	RoleScheduler = "scheduler"
	RoleDialer    = "dialer"
)

// RoleACLs returns the ACLs the principal of role (RoleScheduler or
// RoleDialer) needs, sorted by resource and name; nil for another role.
// Each role runs as a principal of its own, allowed these and nothing
// else; a principal that may write onboarding can make the dialer call
// anyone (every command there is an instruction to dial).
//
//   - Its processor: Read on its group; Read on its inputs, Write on its
//     outputs (the dead-letter topic included), Read and Write on its loop
//     and its table (Goka restores the table from it, and the local
//     stores read it too).
//   - The scheduler's tick emitter writes the ticks topic, an input of
//     its own; the dialer's loop emitter (status callbacks, placements)
//     writes its loop.
//   - Both read the calling policy and the do-not-call list (views of
//     the policy and suppression topics).
//   - Both check every topic at each start (EnsureTopics): Describe, and
//     DescribeConfigs on the compacted ones. Creating a missing topic
//     needs Create, which is left to whoever creates the topics.
//   - The admin listener's page, which either role may serve: it reads the
//     results and both dead-letter topics, and for a user's decision trail
//     (/api/explain) onboarding, followup-events and ivr-calls too; it
//     finds the instances through both groups' members (Describe), and
//     its actions write onboarding (run now) and the policy topic (pause,
//     resume). Writing the
//     suppression topic is left to `ivrsched suppress` (an operator's
//     principal) and to producers allowed to add entries.
func (t Topics) RoleACLs(role string) []ACL {
	ops := map[[2]string][]string{}
	allow := func(resource, name string, op ...string) {
		k := [2]string{resource, name}
		ops[k] = append(ops[k], op...)
	}
	topic := func(name string, op ...string) { allow("Topic", name, op...) }
	switch role {
	case RoleScheduler:
		allow("Group", string(t.Scheduler), "Read")
		topic(string(t.Onboarding), "Read", "Write") // Write: misrouted commands forwarded
		topic(string(t.Ticks), "Read", "Write")
		topic(string(t.SchedulerLoop()), "Read", "Write")
		topic(string(t.SchedulerTable()), "Read", "Write")
		topic(string(t.Calls), "Write")
		topic(string(t.Events), "Write")
		topic(string(t.SchedulerDLQ), "Write")
	case RoleDialer:
		allow("Group", string(t.Dialer), "Read")
		topic(string(t.Calls), "Read")
		topic(string(t.Events), "Read")
		topic(string(t.DialerLoop()), "Read", "Write")
		topic(string(t.DialerTable()), "Read", "Write")
		topic(string(t.Results), "Write")
		topic(string(t.Onboarding), "Write") // outcomes, for the scheduler's retries
		topic(string(t.DialerDLQ), "Write")
	default:
		return nil
	}
	topic(string(t.Policies), "Read")
	topic(string(t.Suppressions), "Read")
	for _, s := range t.Specs() {
		topic(s.Name, "Describe")
		if s.Compact {
			topic(s.Name, "DescribeConfigs")
		}
	}
	// The admin listener's page and /api/explain.
	topic(string(t.Onboarding), "Read")
	topic(string(t.Events), "Read")
	topic(string(t.Calls), "Read")
	topic(string(t.Results), "Read")
	topic(string(t.SchedulerDLQ), "Read")
	topic(string(t.DialerDLQ), "Read")
	allow("Group", string(t.Scheduler), "Describe")
	allow("Group", string(t.Dialer), "Describe")
	topic(string(t.Onboarding), "Write")
	topic(string(t.Policies), "Write")
	topic(string(t.Suppressions), "Write") // the dialer's opt-outs, the admin API's entries

	out := make([]ACL, 0, len(ops))
	for k, o := range ops {
		if slices.Contains(o, "Read") || slices.Contains(o, "Write") { // they imply Describe
			o = slices.DeleteFunc(o, func(op string) bool { return op == "Describe" })
		}
		slices.Sort(o)
		out = append(out, ACL{Resource: k[0], Name: k[1], Operations: slices.Compact(o)})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Resource != out[j].Resource {
			return out[i].Resource < out[j].Resource
		}
		return out[i].Name < out[j].Name
	})
	return out
}
