package placement

import (
	"github.com/IBM/sarama"
)

// Begin, Mark and End make the placer the CommitKeeper of the dialer's
// consumer group (kafkaclient.HoldCommits): Goka's marks of ivr-calls are
// taken by the partitions' commits (commits.go), which mark on the live
// session only up to the first call whose status is not recorded; Goka's
// marks of the loop topic go on, to be committed in order by HoldCommits,
// and release the calls whose first status the marked record recorded.
// Goka's marks of followup-events are kept in order too: a Forget is
// committed only once it retired (forgets.go) and every ivr-calls record
// consumed until then is, so that after a crash either the forgotten
// user's calls are not consumed again or the Forget is. Marks of other
// topics go on (in order, HoldCommits).
//
// A partition's commits mark on the session that was live when the
// partition came (MarkRecovered runs inside Goka's Setup of that session)
// and stop when the partition is given up or the session ends, whichever
// comes first: nothing is marked on a session that ended.

// KeepsOrder tells kafkaclient.HoldCommits which topics the placer commits in
// order itself: ivr-calls and followup-events. The loop's marks it passes
// on are committed in order there.
func (p *Placer) KeepsOrder(topic string) bool {
	return topic == p.cfg.Calls || topic == p.cfg.Events
}

// Begin records the session that starts (before Goka's Setup).
func (p *Placer) Begin(sess sarama.ConsumerGroupSession) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.session = sess
	p.claims = map[int32][]sarama.ConsumerGroupClaim{}
}

// Mark takes Goka's mark of next on a partition of topic, in session sess.
func (p *Placer) Mark(sess sarama.ConsumerGroupSession, topic string, part int32, next int64) bool {
	switch topic {
	case p.cfg.Calls:
		if owned := p.partition(part); owned != nil && owned.session == sess {
			owned.commits.done(next - 1)
		}
		return false
	case p.cfg.Events:
		if owned := p.partition(part); owned != nil && owned.session == sess {
			owned.events.done(next - 1)
			// A record Goka passed over without a callback (a nil value)
			// is consumed too.
			p.queueWaiting(owned, owned.consumed(next-1))
		}
		return false
	case p.cfg.Loop:
		if owned := p.partition(part); owned != nil && owned.session == sess {
			for _, o := range owned.recorded(next - 1) {
				owned.commits.done(o)
			}
		}
	}
	return true
}

// End stops every mark on sess (after Goka's Cleanup).
func (p *Placer) End(sess sarama.ConsumerGroupSession) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.session == sess {
		p.session = nil
		p.claims = nil
	}
	for _, part := range p.owned {
		if part.session == sess {
			part.commits.unbind()
			part.events.unbind()
		}
	}
}

// newPartition is partition id coming to this process in the live
// session, whose ivr-calls commits it marks.
func (p *Placer) newPartition(id int32) *partition {
	p.mu.Lock()
	sess := p.session
	p.mu.Unlock()
	var calls, events Marker
	if sess != nil {
		calls = func(next int64) { sess.MarkOffset(p.cfg.Calls, id, next, "") }
		events = func(next int64) { sess.MarkOffset(p.cfg.Events, id, next, "") }
	}
	return newPartition(id, newCommits(calls), newCommits(events), newForgets(&p.recent), sess)
}

// Claim takes a claim of session sess before Goka consumes it
// (kafkaclient.ClaimWatcher): the claim of followup-events says where they
// ended when the session claimed them (the partition's calls wait until
// the dialer consumed them up to there), the claim of ivr-calls where
// those end (a recent Forget retires on a quiet partition once they are
// consumed up to there). A claim may come before its partition is
// restored (Goka's Setup runs beside the claims): the partition takes the
// session's claims when it comes.
func (p *Placer) Claim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) {
	p.mu.Lock()
	if p.session != sess {
		p.mu.Unlock()
		return
	}
	p.claims[claim.Partition()] = append(p.claims[claim.Partition()], claim)
	owned := p.owned[claim.Partition()]
	p.mu.Unlock()
	if owned != nil && owned.session == sess {
		p.takeClaim(owned, claim)
	}
}

// takeClaim hands a claim to its partition (again, maybe: it takes it once).
func (p *Placer) takeClaim(part *partition, claim sarama.ConsumerGroupClaim) {
	switch claim.Topic() {
	case p.cfg.Calls:
		part.claimCalls(claim)
	case p.cfg.Events:
		p.queueWaiting(part, part.claimEvents(claim))
	}
}

// claimed hands a partition that came the claims its session had already.
func (p *Placer) claimed(part *partition) {
	p.mu.Lock()
	var claims []sarama.ConsumerGroupClaim
	if part.session == p.session {
		claims = append(claims, p.claims[part.id]...)
	}
	p.mu.Unlock()
	for _, c := range claims {
		p.takeClaim(part, c)
	}
}
