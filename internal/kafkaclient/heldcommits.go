package kafkaclient

import (
	"context"
	"sync/atomic"

	"github.com/IBM/sarama"
)

// CommitKeeper decides what a consumer group commits: Goka marks each
// message consumed once its callback returned and what it wrote was
// acknowledged (it calls the session's MarkOffset with the message's
// offset + 1), and HoldCommits hands those marks to the keeper instead.
//
// Begin is called when a session starts, before Goka's Setup; End when it
// ends, after Goka's Cleanup and before Sarama's last commit of the
// session: once End returns, the keeper must not mark on that session
// again. Mark is called with Goka's marks, concurrently from the
// partitions' goroutines and the producer's callbacks; it returns whether
// the mark goes on to the session. A keeper marks on the session it was
// given (sess in Begin and Mark: Sarama's own, not the wrapper Goka sees).
type CommitKeeper interface {
	Begin(sess sarama.ConsumerGroupSession)
	Mark(sess sarama.ConsumerGroupSession, topic string, partition int32, next int64) (pass bool)
	End(sess sarama.ConsumerGroupSession)
}

// ClaimWatcher is a CommitKeeper that is also told of each claim of a
// session (the partition of one topic it consumes: where it starts, and
// the partition's end as last seen) before Goka consumes it. Claim is
// called concurrently from the claims' goroutines.
type ClaimWatcher interface {
	Claim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim)
}

// OrderKeeper is a CommitKeeper that keeps the commits of some topics in
// order itself (it marks them on Sarama's session): HoldCommits leaves
// their claims and marks to it. A keeper that does not pass the marks of a
// topic must keep that topic's order itself: HoldCommits would otherwise
// hold the topic's records, unmarked, until the session ends.
type OrderKeeper interface {
	KeepsOrder(topic string) bool
}

// HoldCommits wraps cg so that every partition of every input of the
// sessions Goka gets is committed in order: Goka marks a record once its
// own emits and table writes are acknowledged, and Sarama commits the
// highest mark, so a later record that wrote nothing would commit past an
// earlier one whose writes are still in flight (lost if the process then
// dies). Here a mark goes on to Sarama's session only up to the first
// record handed to Goka that is not marked yet (order.go).
//
// keeper, if not nil, sees Goka's marks first (CommitKeeper): a mark it
// does not pass is not committed, and the topics it keeps in order itself
// (OrderKeeper) are left to it. Other groups' sessions and everything else
// of a session are untouched.
func HoldCommits(cg sarama.ConsumerGroup, keeper CommitKeeper) sarama.ConsumerGroup {
	return heldGroup{ConsumerGroup: cg, keeper: keeper}
}

type heldGroup struct {
	sarama.ConsumerGroup
	keeper CommitKeeper
}

func (g heldGroup) Consume(ctx context.Context, topics []string, h sarama.ConsumerGroupHandler) error {
	return g.ConsumerGroup.Consume(ctx, topics, &heldHandler{h: h, keeper: g.keeper})
}

// heldHandler gives Goka's handler sessions whose marks go to the keeper,
// then in order to Sarama's session. Sarama calls Setup, then ConsumeClaim
// from one goroutine per claim, then Cleanup; sessions follow each other.
type heldHandler struct {
	h      sarama.ConsumerGroupHandler
	keeper CommitKeeper // nil: none
	cur    atomic.Pointer[sessionOrder]
}

func (h *heldHandler) Setup(s sarama.ConsumerGroupSession) error {
	o := newSessionOrder(s, h.keeper)
	h.cur.Store(o)
	if h.keeper != nil {
		h.keeper.Begin(s)
	}
	return h.h.Setup(heldSession{ConsumerGroupSession: s, keeper: h.keeper, order: o})
}

func (h *heldHandler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	if w, ok := h.keeper.(ClaimWatcher); ok {
		w.Claim(s, c)
	}
	o := h.cur.Load()
	return o.consume(c, func(c sarama.ConsumerGroupClaim) error {
		return h.h.ConsumeClaim(heldSession{ConsumerGroupSession: s, keeper: h.keeper, order: o}, c)
	})
}

func (h *heldHandler) Cleanup(s sarama.ConsumerGroupSession) error {
	o := h.cur.Load()
	defer func() {
		o.end()
		if h.keeper != nil {
			h.keeper.End(s)
		}
	}()
	return h.h.Cleanup(heldSession{ConsumerGroupSession: s, keeper: h.keeper, order: o})
}

// heldSession is a session whose marks go to the keeper first, then to the
// session's order.
type heldSession struct {
	sarama.ConsumerGroupSession
	keeper CommitKeeper
	order  *sessionOrder
}

func (s heldSession) MarkOffset(topic string, partition int32, offset int64, metadata string) {
	if s.keeper != nil && !s.keeper.Mark(s.ConsumerGroupSession, topic, partition, offset) {
		return
	}
	s.order.mark(topic, partition, offset, metadata)
}

func (s heldSession) MarkMessage(msg *sarama.ConsumerMessage, metadata string) {
	s.MarkOffset(msg.Topic, msg.Partition, msg.Offset+1, metadata)
}
