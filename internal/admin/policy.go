package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lovoo/goka"
	gokacodec "github.com/lovoo/goka/codec"

	"github.com/ivrsched/ivrsched/internal/kafkaclient"
	"github.com/ivrsched/ivrsched/internal/policy"
	"github.com/ivrsched/ivrsched/topology"
)

// The calling policy is the one value of the policy topic that every
// scheduler reads (docs/policy.md). The CLI's
// `policy`, `pause` and `resume` and the web page read and write it here.

// ErrNoPolicy: no calling policy is set, and a pause is part of one.
var ErrNoPolicy = errors.New("no calling policy is set, and a pause is part of it: set one first (ivrsched policy set -f FILE; testdata/policy.yaml)")

// ErrNotPaused: a resume for a campaign that is not paused.
var ErrNotPaused = errors.New("is not paused")

// StoredPolicy returns the stored policy's bytes; nil when none is set (or
// the topic does not exist yet).
func (c *Client) StoredPolicy(ctx context.Context) ([]byte, error) {
	topic := c.Topics.Policies
	client, err := c.Kafka.Connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", topic, err)
	}
	topics, err := client.Topics()
	client.Close()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", topic, err)
	}
	if !slices.Contains(topics, string(topic)) {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.Kafka.DialTimeout)
	defer cancel()
	var val any
	err = kafkaclient.ReadView(ctx, c.Kafka, goka.Table(topic), func(v *goka.View) (err error) {
		val, err = v.Get(policy.Key)
		return err
	}, goka.WithViewLogger(quietLogger{}))
	if err != nil {
		return nil, err
	}
	b, _ := val.([]byte)
	return b, nil
}

// WritePolicy writes p to the policy topic, creating the topic if need be.
func (c *Client) WritePolicy(ctx context.Context, p *policy.Policy) error {
	topic := c.Topics.Policies
	if err := topology.EnsureTopics(ctx, c.Kafka, []topology.TopicSpec{policySpec(c.Topics)}); err != nil {
		return fmt.Errorf("topic %s: %w", topic, err)
	}
	em, err := goka.NewEmitter(c.Kafka.Brokers, goka.Stream(topic), new(gokacodec.Bytes), c.Kafka.EmitterOptions()...)
	if err != nil {
		return fmt.Errorf("produce to %s: %w", topic, err)
	}
	err = em.EmitSync(policy.Key, p.Encode())
	if ferr := em.Finish(); err == nil {
		err = ferr
	}
	if err != nil {
		return fmt.Errorf("produce to %s: %w", topic, err)
	}
	return nil
}

// SetPause pauses campaign until the given instant (campaigns.<C>.paused_until
// in the stored policy), or ends its pause (until nil), and writes the
// policy back; it returns the policy written. Two changes of the policy at
// the same moment: the later write wins.
func (c *Client) SetPause(ctx context.Context, campaign string, until *time.Time) (*policy.Policy, error) {
	raw, err := c.StoredPolicy(ctx)
	if err != nil {
		return nil, err
	}
	if raw == nil {
		return nil, ErrNoPolicy
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("%s holds a policy that does not parse: %w", c.Topics.Policies, err)
	}
	camps, _ := doc["campaigns"].(map[string]any)
	if camps == nil {
		camps = map[string]any{}
	}
	rules, _ := camps[campaign].(map[string]any)
	if rules == nil {
		rules = map[string]any{}
	}
	if until != nil {
		rules["paused_until"] = until.UTC().Format(time.RFC3339)
	} else {
		if _, ok := rules["paused_until"]; !ok {
			return nil, fmt.Errorf("campaign %q %w", campaign, ErrNotPaused)
		}
		delete(rules, "paused_until")
	}
	if len(rules) == 0 {
		delete(camps, campaign)
	} else {
		camps[campaign] = rules
	}
	doc["campaigns"] = camps
	b, _ := json.Marshal(doc)
	p, err := policy.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("the paused policy does not parse (a bug): %w", err)
	}
	if err := c.WritePolicy(ctx, p); err != nil {
		return nil, err
	}
	return p, nil
}

func policySpec(t topology.Topics) topology.TopicSpec {
	for _, s := range t.Specs() {
		if s.Name == string(t.Policies) {
			return s
		}
	}
	panic("topology: no spec for the policy topic")
}

// quietLogger drops Goka's log lines.
type quietLogger struct{}

func (quietLogger) Print(...any)          {}
func (quietLogger) Println(...any)        {}
func (quietLogger) Printf(string, ...any) {}
