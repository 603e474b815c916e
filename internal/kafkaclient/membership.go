package kafkaclient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
)

// Membership remembers the consumer group member id of a role's processor,
// so that after the processor failed (a lost broker, say) the role can
// take that member out of the group (Leave) before it joins again. Without
// it the group keeps the dead member until its session times out (10 s by
// default) and the rejoin waits that long after the broker is back. A
// processor that closes while the broker answers leaves by itself; one
// with static membership (Kafka.InstanceID) is replaced at its rejoin, so
// it needs nothing.
//
// Its sessions also start their partition consumers while Goka restores
// the partitions (earlyClaims).
//
// Set the exported fields before Option; a Membership serves one processor.
type Membership struct {
	Kafka Kafka            // the cluster, and the consumer groups' configuration
	Group string           // the processor's group
	Ended func(clean bool) // told at each session's end; nil: nobody
	Gate  <-chan struct{}  // closed when callbacks may run; nil: at once
	// Commits, if set, sees the group's commits first (HoldCommits, which
	// commits every input partition in order).
	Commits CommitKeeper

	mu     sync.Mutex
	member string
}

// Option wraps the role's consumer group so that its commits are kept in
// order and each session's member id is recorded. It goes after the
// cluster's own options (Kafka.ProcessorOptions).
func (m *Membership) Option() goka.ProcessorOption {
	return goka.WithConsumerGroupBuilder(func(brokers []string, group, clientID string) (sarama.ConsumerGroup, error) {
		cg, err := m.Kafka.ConsumerGroupBuilder(brokers, group, clientID)
		if err != nil {
			return nil, err
		}
		// Each input partition is committed only up to its first record
		// whose writes Kafka has not acknowledged.
		cg = HoldCommits(cg, m.Commits)
		return memberRecorder{ConsumerGroup: cg, m: m}, nil
	})
}

// Leave takes the last recorded member out of the group, if it is still in.
func (m *Membership) Leave(ctx context.Context) error {
	m.mu.Lock()
	member := m.member
	m.member = ""
	m.mu.Unlock()
	if member == "" || m.Kafka.InstanceID != "" {
		return nil
	}
	client, err := m.Kafka.Connect(ctx)
	if err != nil {
		return err
	}
	defer client.Close()
	// A broker just back may not coordinate the group yet: ask again.
	for attempt := 1; ; attempt++ {
		err := m.leaveOnce(client, member)
		if err == nil || attempt == leaveAttempts || !retriable(err) {
			return err
		}
		if err := client.RefreshCoordinator(m.Group); err != nil && attempt == leaveAttempts-1 {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(leaveRetry):
		}
	}
}

const (
	leaveAttempts = 20
	leaveRetry    = 250 * time.Millisecond
)

func retriable(err error) bool {
	return errors.Is(err, sarama.ErrNotCoordinatorForConsumer) || errors.Is(err, sarama.ErrOffsetsLoadInProgress) ||
		errors.Is(err, sarama.ErrConsumerCoordinatorNotAvailable) || errors.Is(err, sarama.ErrNotEnoughReplicas)
}

func (m *Membership) leaveOnce(client sarama.Client, member string) error {
	coord, err := client.Coordinator(m.Group)
	if err != nil {
		return fmt.Errorf("coordinator of %s: %w", m.Group, err)
	}
	resp, err := coord.LeaveGroup(&sarama.LeaveGroupRequest{Version: 4, GroupId: m.Group, Members: []sarama.MemberIdentity{{MemberId: member}}})
	if err != nil {
		return fmt.Errorf("leave group %s: %w", m.Group, err)
	}
	for _, e := range append([]sarama.KError{resp.Err}, memberErrs(resp)...) {
		if e != sarama.ErrNoError && !errors.Is(e, sarama.ErrUnknownMemberId) {
			return fmt.Errorf("leave group %s: %w", m.Group, e)
		}
	}
	return nil
}

func memberErrs(r *sarama.LeaveGroupResponse) []sarama.KError {
	out := make([]sarama.KError, len(r.Members))
	for i, m := range r.Members {
		out[i] = m.Err
	}
	return out
}

type memberRecorder struct {
	sarama.ConsumerGroup
	m *Membership
}

func (r memberRecorder) Consume(ctx context.Context, topics []string, h sarama.ConsumerGroupHandler) error {
	return r.ConsumerGroup.Consume(ctx, topics, sessionRecorder{ConsumerGroupHandler: &earlyClaims{ConsumerGroupHandler: h, gate: r.m.Gate}, m: r.m})
}

type sessionRecorder struct {
	sarama.ConsumerGroupHandler
	m *Membership
}

// Cleanup ends the session (Goka closes the partitions' stores) and tells
// whether it ended cleanly: Goka's Cleanup fails when a partition did.
func (s sessionRecorder) Cleanup(sess sarama.ConsumerGroupSession) error {
	err := s.ConsumerGroupHandler.Cleanup(sess)
	if s.m.Ended != nil {
		s.m.Ended(err == nil)
	}
	return err
}

func (s sessionRecorder) Setup(sess sarama.ConsumerGroupSession) error {
	s.m.mu.Lock()
	s.m.member = sess.MemberID()
	s.m.mu.Unlock()
	return s.ConsumerGroupHandler.Setup(sess)
}
