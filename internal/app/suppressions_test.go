package app

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ivrsched/ivrsched/internal/kafkaclient"
	"github.com/ivrsched/ivrsched/internal/suppress"
	"github.com/ivrsched/ivrsched/topology"
)

var testSuppressionKey = suppress.Key("app-test-suppression-key-0123456789")

// A role that reads the do-not-call list does not start without a key, or
// with one too short, and says so before it reaches for the brokers.
func TestRolesRefuseToStartWithoutASuppressionKey(t *testing.T) {
	for _, c := range []struct {
		key  suppress.Key
		want string
	}{{nil, "--suppression-key-file or IVRSCHED_SUPPRESSION_KEY"}, {suppress.Key("short"), "at least 32"}} {
		cfg := Config{
			Kafka:          kafkaclient.Kafka{Hasher: topology.Murmur2(), Brokers: []string{"127.0.0.1:1"}, Partitions: 1, Replication: 1},
			Topics:         topology.NewTopics("nokey-"),
			DataDir:        t.TempDir(),
			SuppressionKey: c.key,
		}
		for _, roles := range []Roles{{Scheduler: true}, {Dialer: true}} {
			err := Run(context.Background(), cfg, roles, nil)
			if !errors.Is(err, kafkaclient.ErrConfig) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("key %q, roles %+v: %v, want a configuration error with %q", c.key, roles, err, c.want)
			}
		}
	}
}
