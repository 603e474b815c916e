package admin

import (
	"encoding/json"
	"fmt"
	"sort"

	"github.com/IBM/sarama"
)

// Instance is a member of one of ivrsched's consumer groups with its admin
// address and the partitions it owns (of the group's input topic).
type Instance struct {
	Group      string
	Member     string
	URL        string
	Partitions []int32
}

// Discover describes group and returns its members that announce an admin
// address, with the partitions of topic each owns. A member without an
// announcement (its instance serves no web server) is left out; the
// partitions it owns are in the second result.
func Discover(client sarama.Client, group, topic string) (found []Instance, unannounced []int32, err error) {
	ca, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		return nil, nil, fmt.Errorf("admin client: %w", err)
	}
	// Not ca.Close: it would close the shared client.
	descs, err := ca.DescribeConsumerGroups([]string{group})
	if err != nil {
		return nil, nil, fmt.Errorf("describe group %s: %w", group, err)
	}
	for _, d := range descs {
		if d.Err != sarama.ErrNoError {
			return nil, nil, fmt.Errorf("describe group %s: %w", group, d.Err)
		}
		for id, m := range d.Members {
			asg, err := m.GetMemberAssignment()
			if err != nil {
				return nil, nil, fmt.Errorf("assignment of %s in %s: %w", id, group, err)
			}
			var parts []int32
			if asg != nil {
				parts = append(parts, asg.Topics[topic]...)
			}
			sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
			meta, err := m.GetMemberMetadata()
			var a Announcement
			if err != nil || meta == nil || json.Unmarshal(meta.UserData, &a) != nil || a.URL == "" {
				unannounced = append(unannounced, parts...)
				continue
			}
			found = append(found, Instance{Group: group, Member: id, URL: a.URL, Partitions: parts})
		}
	}
	sort.Slice(found, func(i, j int) bool { return found[i].URL < found[j].URL })
	return found, unannounced, nil
}

// Owner returns the instance that owns partition p, if any.
func Owner(instances []Instance, p int32) (Instance, bool) {
	for _, in := range instances {
		for _, q := range in.Partitions {
			if q == p {
				return in, true
			}
		}
	}
	return Instance{}, false
}
