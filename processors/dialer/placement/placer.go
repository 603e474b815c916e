// Package placement places the dialer's calls off its partition goroutines:
// a pool of workers (at most --max-in-flight calls at a time), a
// calls-per-second bucket the workers share (--cps, of which this process
// takes the share of the partitions it owns), and retries of 429 and 5xx
// answers with backoff and Retry-After within each call's deadline. Each
// placement's answer goes to the dialer's loop topic, where the dialer
// records it.
//
// Calls in flight are the uncommitted tail of ivr-calls: the placer holds
// each call it is given until its first status is recorded, and keeps the
// commits of ivr-calls in offset order (commits.go): as the dialer's
// CommitKeeper (keeper.go) it takes Goka's marks of the dialer's consumer
// group and commits each partition of ivr-calls only up to its first call
// whose status is not recorded. After a crash or a rebalance the
// partition's next owner consumes those calls again. Through a wrapper of
// the dialer table's storage it learns which partitions this process owns,
// and places the calls that values written by earlier versions list in
// flight. docs/design.md explains why nothing is lost or placed twice.
package placement

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/clock"
	"github.com/ivrsched/ivrsched/internal/providers/provider"
	"github.com/ivrsched/ivrsched/internal/ratelimit"
	"github.com/ivrsched/ivrsched/internal/suppress"
)

// Emitter takes the placements' answers: a *pb.CallStatus keyed by user id,
// for the dialer's loop topic (a *goka.Emitter). Emit is called
// concurrently from the workers.
type Emitter interface {
	Emit(key string, msg any) (*goka.Promise, error)
}

// Config configures the placer.
type Config struct {
	Provider provider.Provider
	Results  Emitter
	// Table is the dialer's table topic, whose partitions StorageBuilder
	// wraps; Partitions is its partition count.
	Table      string
	Partitions int
	// Calls, Events and Loop are the topics of the dialer's calls
	// (ivr-calls), of the scheduler's events (followup-events) and of its
	// loop: their commits are kept (CommitKeeper).
	Calls, Events, Loop string
	// MaxInFlight is how many calls this process places at a time, each
	// from its answer's wait for a token to its answer being stored.
	MaxInFlight int
	// CPS is the calls per second of the provider account, for the whole
	// deployment (0: no limit): this process sends at most
	// CPS × owned partitions / Partitions requests per second, retries
	// included.
	CPS float64
	// CallTimeout bounds one request; Deadline all requests of one call
	// (from the first request, waits for retries included).
	CallTimeout, Deadline time.Duration
	// MinBackoff doubles after each retryable answer, up to MaxBackoff; a
	// longer Retry-After is honoured.
	MinBackoff, MaxBackoff time.Duration
	// Drain is how long requests under way may finish when the placer
	// stops; a call cut off stays uncommitted in ivr-calls and is placed
	// again at the next start.
	Drain time.Duration
	// ForgetGrace is how long a partition whose ivr-calls are consumed to
	// their end still drops the calls fired before a Forget it consumed
	// (forgets.go): the longest a call's write may still be under way when
	// the scheduler's Forget event is written. Default 1 minute.
	ForgetGrace time.Duration
	// Latency, if set, observes each provider request's duration in
	// seconds, answered or not; RateWait, if set, how long each request
	// waited for its token of the calls-per-second bucket (only with a
	// CPS limit). Both are called concurrently from the workers (a
	// Prometheus histogram is an Observer).
	Latency, RateWait Observer
	// Suppressions is the do-not-call list (nil: none), checked just
	// before each request: a listed number's call is not placed, its
	// answer is OUTCOME_SUPPRESSED (final), recorded and reported like any
	// answer. A list that cannot be read holds the call back like a
	// retryable refusal, until the call's deadline (then it fails).
	Suppressions suppress.Checker
	Clock        clock.Clock
	Logger       *slog.Logger
}

// Observer takes one observation (prometheus.Observer is one). It is
// called concurrently.
type Observer interface{ Observe(float64) }

func (c *Config) setDefaults() {
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = 100
	}
	if c.Partitions <= 0 {
		c.Partitions = 1
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 10 * time.Second
	}
	if c.Deadline <= 0 {
		c.Deadline = 2 * time.Minute
	}
	if c.MinBackoff <= 0 {
		c.MinBackoff = 500 * time.Millisecond
	}
	if c.MaxBackoff < c.MinBackoff {
		c.MaxBackoff = max(30*time.Second, c.MinBackoff)
	}
	if c.Drain <= 0 {
		c.Drain = c.CallTimeout
	}
	if c.ForgetGrace <= 0 {
		c.ForgetGrace = time.Minute
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Stats counts what the placer did since it started. Queued and Placing
// are gauges.
type Stats struct {
	Queued, Placing atomic.Int64
	// Answered: calls whose answer (placed or failed) was stored.
	Answered, Failed atomic.Int64
	// Requests sent, and those answered 429 or 5xx (then retried, or
	// failed at the deadline).
	Requests, TooMany, ServerErrors atomic.Int64
	// Skipped: calls no longer held when their turn came (a status
	// recorded already, the user forgotten, or the partition gone to
	// another owner).
	Skipped atomic.Int64
	// Resubmitted: calls found in flight in values written by earlier
	// versions when a partition came.
	Resubmitted atomic.Int64
	// Suppressed: calls not placed because their number is on the
	// do-not-call list.
	Suppressed atomic.Int64
	// Unreadable: values that listed calls in flight but did not decode
	// when a partition came (their calls are not placed again).
	Unreadable atomic.Int64
}

// The queue holds the calls submitted and not yet taken by a worker. A full
// queue holds the submitting callbacks back, which also holds back the
// answers of their partitions (one goroutine per partition): the queue is
// made large enough (about 0.5 KiB a call) that only a backlog of this size
// waits, not the steady state under a calls-per-second limit.
const (
	queueMin       = 100_000
	queuePerWorker = 100
)

// ErrNotOwned is returned by Submit for a partition this process does not
// own (any more).
var ErrNotOwned = errors.New("placement: partition not owned")

// Placer places calls. Submit is called from the dialer's partition
// goroutines, Run once; the rest is safe for concurrent use.
type Placer struct {
	cfg    Config
	bucket *ratelimit.Bucket // nil: no calls-per-second limit
	queue  chan job
	Stats  Stats
	// answered holds the calls answered and not recorded yet, across
	// sessions.
	answered answered
	// recent counts the recent Forgets of the owned partitions: while it
	// is 0, a call is not looked up (forgets.go).
	recent atomic.Int64

	mu      sync.Mutex
	owned   map[int32]*partition
	session sarama.ConsumerGroupSession           // the live session (CommitKeeper); nil: none
	claims  map[int32][]sarama.ConsumerGroupClaim // the live session's claims, by partition
	busy    map[string]chan struct{}              // user and call ids a worker is placing; closed when done
	active  int                                   // queued or being placed
	idle    chan struct{}                         // closed when active drops to 0
	jitter  func() float64
}

type job struct {
	part *partition
	call *pb.IVRCall
}

// New returns a placer.
func New(cfg Config) (*Placer, error) {
	cfg.setDefaults()
	switch {
	case cfg.Provider == nil:
		return nil, errors.New("placement: no provider")
	case cfg.Results == nil:
		return nil, errors.New("placement: nowhere to send the answers")
	case cfg.Table == "" || cfg.Calls == "" || cfg.Events == "" || cfg.Loop == "":
		return nil, errors.New("placement: no table, calls, events or loop topic")
	case cfg.CPS < 0:
		return nil, fmt.Errorf("placement: calls per second %v", cfg.CPS)
	}
	p := &Placer{
		cfg:    cfg,
		queue:  make(chan job, max(queueMin, queuePerWorker*cfg.MaxInFlight)),
		owned:  map[int32]*partition{},
		busy:   map[string]chan struct{}{},
		idle:   make(chan struct{}),
		jitter: rand.Float64,
	}
	if cfg.CPS > 0 {
		p.bucket = ratelimit.New(cfg.Clock, 0, 1) // no share until a partition is owned
	}
	return p, nil
}

// own makes part owned and takes its share of the calls per second.
func (p *Placer) own(part *partition) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if old := p.owned[part.id]; old != nil {
		p.unqueueLocked(old.giveUp())
	}
	p.owned[part.id] = part
	if part.session != p.session { // the session ended while the partition came
		part.commits.unbind()
	}
	p.share()
}

// disown gives part up: its calls still queued are skipped.
func (p *Placer) disown(part *partition) {
	waiting := part.giveUp()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.owned[part.id] == part {
		delete(p.owned, part.id)
	}
	p.share()
	p.unqueueLocked(waiting)
}

// unqueueLocked ends the calls that waited for a partition given up (they
// stay uncommitted in ivr-calls for its next owner). Called with mu held.
func (p *Placer) unqueueLocked(jobs []job) {
	for range jobs {
		p.Stats.Queued.Add(-1)
		p.endLocked()
	}
}

// share sets the bucket's rate to this process's share. Called with mu held.
//
// The bucket saves up to a fifth of a second of calls (at least one): a
// worker that wakes late for its token (a busy machine, a pause of the
// collector) sends the calls it owes at once instead of losing them from
// the rate. A provider sees at most that many calls above its rate in any
// window.
func (p *Placer) share() {
	if p.bucket != nil {
		rate := p.cfg.CPS * float64(len(p.owned)) / float64(p.cfg.Partitions)
		p.bucket.SetLimit(rate, int(math.Ceil(rate/5)))
	}
}

// Rate is this process's calls per second now (0: no limit, or no
// partition owned with a limit).
func (p *Placer) Rate() float64 {
	if p.bucket == nil {
		return 0
	}
	return p.bucket.Rate()
}

// InFlight is how many calls the owned partitions hold: queued or being
// placed, their first status not recorded yet.
func (p *Placer) InFlight() int {
	p.mu.Lock()
	parts := make([]*partition, 0, len(p.owned))
	for _, part := range p.owned {
		parts = append(parts, part)
	}
	p.mu.Unlock()
	n := 0
	for _, part := range parts {
		n += part.count()
	}
	return n
}

// begin counts n calls as queued.
func (p *Placer) begin(n int) {
	p.mu.Lock()
	p.active += n
	p.mu.Unlock()
	p.Stats.Queued.Add(int64(n))
}

func (p *Placer) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endLocked()
}

func (p *Placer) endLocked() {
	if p.active--; p.active == 0 {
		close(p.idle)
		p.idle = make(chan struct{})
	}
}

// Idle returns a channel closed once nothing is queued or being placed
// (closed already if nothing is).
func (p *Placer) Idle() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.active == 0 {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	return p.idle
}

// Track registers the ivr-calls record at offset of partition part, which
// the dialer dropped (a call id seen before, or a record not to place):
// it is committed once Goka commits it. The dialer calls Track or Submit
// for every record of ivr-calls, in offset order, on the partition's
// goroutine.
func (p *Placer) Track(part int32, offset int64) {
	if owned := p.partition(part); owned != nil {
		owned.commits.add(offset, 1)
	}
}

// Submit queues the call of the ivr-calls record at offset of partition
// part, unless the partition holds its call id already (then false, and
// the record is tracked as dropped). The placer holds the call until its
// first status is recorded (Record) or its user is forgotten (Forget);
// the record is committed once both that and Goka's commit of it happened.
// Submit waits while the queue is full (holding the partition's callback
// back) until ctx ends or the partition is given up; the call stays
// uncommitted in ivr-calls then, and is placed by the partition's next
// owner. Until the partition's followup-events are caught up (inflight.go)
// the call waits, held, without holding the callback back.
func (p *Placer) Submit(ctx context.Context, part int32, offset int64, call *pb.IVRCall) (bool, error) {
	owned := p.partition(part)
	if owned == nil {
		return false, fmt.Errorf("%w: %d", ErrNotOwned, part)
	}
	if !owned.hold(call.GetUserId(), held{call: call, offset: offset}) {
		owned.commits.add(offset, 1)
		return false, nil
	}
	owned.commits.add(offset, 2)
	p.begin(1)
	j := job{part: owned, call: call}
	if owned.wait(j) {
		return true, nil
	}
	return true, p.enqueue(ctx, j)
}

// queueWaiting queues, in the background, the calls that waited for their
// partition to be ready.
func (p *Placer) queueWaiting(part *partition, jobs []job) {
	if len(jobs) == 0 {
		return
	}
	go func() {
		for i, j := range jobs {
			if p.enqueue(context.Background(), j) != nil {
				for range jobs[i+1:] { // given up
					p.Stats.Queued.Add(-1)
					p.end()
				}
				return
			}
		}
	}()
}

// Record tells the placer that the loop record at loopOffset records a
// status of a call: it returns the call if partition part held it (its first
// status), and no longer holds it (a worker that has not placed it skips it).
// The call's ivr-calls record is done once Goka commits the loop record (what
// it wrote is acknowledged). Called on the partition's goroutine.
func (p *Placer) Record(part int32, user, callID string, loopOffset int64) *pb.IVRCall {
	owned := p.partition(part)
	if owned == nil {
		return nil
	}
	h, ok := owned.release(user, callID, loopOffset)
	p.answered.take(part, user, callID)
	if !ok {
		return nil
	}
	return h.call
}

// Event registers the followup-events record at offset of partition part:
// it is committed once Goka commits it. The dialer calls Event or Forget
// for every record of followup-events, in offset order, on the partition's
// goroutine.
func (p *Placer) Event(part int32, offset int64) {
	if owned := p.partition(part); owned != nil {
		owned.events.add(offset, 1)
		p.queueWaiting(owned, owned.consumed(offset))
	}
}

// Forget drops the calls partition part holds for user (forgotten, or
// expired), on the followup-events record at offset, whose time (the
// scheduler's) is at (zero: an expiry): those not placed yet are not placed,
// and their ivr-calls records are done. The partition remembers the
// Forget while a call of the user fired at or before at may still be
// consumed (Forgotten, forgets.go). The record is committed once Goka
// commits it and, the Forget retired, every ivr-calls record consumed
// before that is committed: after a crash, a call of the user that was
// not committed is consumed again only with the Forget, which a restarted
// partition consumes before it places a call. Called on the partition's
// goroutine.
func (p *Placer) Forget(part int32, user string, at time.Time, offset int64) {
	owned := p.partition(part)
	if owned == nil {
		return
	}
	owned.events.add(offset, 2)
	for _, h := range owned.forget(user) {
		if h.offset >= 0 {
			owned.commits.done(h.offset)
		}
	}
	p.answered.forget(part, user)
	switch {
	case at.IsZero():
		// An expiry: the user had no call for the scheduler's retention,
		// so none is on its way; nothing to remember.
		owned.commits.after(func() { owned.events.done(offset) })
	case owned.forgets.add(&forgot{user: user, at: at, offset: offset, since: p.cfg.Clock.Now()}):
		go p.sweep(owned)
	}
	p.queueWaiting(owned, owned.consumed(offset))
}

// Forgotten reports whether call, consumed from ivr-calls of partition
// part, was fired at or before a recent Forget of its user (or carries no
// time while one is recent): the dialer drops it then (Track). A call
// fired after a recent Forget retires it. Called on the partition's
// goroutine before the call's record is registered (Submit or Track); a
// load of a counter while no Forget is recent.
func (p *Placer) Forgotten(part int32, call *pb.IVRCall) bool {
	if p.recent.Load() == 0 {
		return false
	}
	owned := p.partition(part)
	if owned == nil {
		return false
	}
	drop, retired := owned.forgets.check(call.GetUserId(), call.GetFiredAt())
	p.retire(owned, retired)
	return drop
}

// retire lets the followup-events records of Forgets that can no longer
// drop a call be committed, once every ivr-calls record registered so far
// is: those dropped for them included.
func (p *Placer) retire(part *partition, fs []*forgot) {
	for _, f := range fs {
		offset := f.offset
		part.commits.after(func() { part.events.done(offset) })
	}
}

// sweep retires the partition's recent Forgets on a quiet partition:
// ForgetGrace after each was consumed, once ivr-calls is caught up. It
// runs while the partition has recent Forgets.
func (p *Placer) sweep(part *partition) {
	poll := min(time.Second, p.cfg.ForgetGrace)
	for {
		select {
		case <-p.cfg.Clock.After(poll):
		case <-part.done:
			part.forgets.due(time.Time{}, 0, false) // stops the sweeping
			return
		}
		retired, more := part.forgets.due(p.cfg.Clock.Now(), p.cfg.ForgetGrace, part.callsCaughtUp())
		p.retire(part, retired)
		if !more {
			return
		}
	}
}

func (p *Placer) partition(part int32) *partition {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.owned[part]
}

// enqueue queues a job counted by begin.
func (p *Placer) enqueue(ctx context.Context, j job) error {
	select {
	case p.queue <- j:
		return nil
	case <-ctx.Done():
		p.Stats.Queued.Add(-1)
		p.end()
		return ctx.Err()
	case <-j.part.done:
		p.Stats.Queued.Add(-1)
		p.end()
		return fmt.Errorf("%w: %d", ErrNotOwned, j.part.id)
	}
}

// resubmit queues, in the background, the calls a partition's table
// listed in flight when it came to this process (values written by earlier
// versions), holding them with no ivr-calls record.
func (p *Placer) resubmit(part *partition, calls []*pb.IVRCall) {
	n := 0
	for _, c := range calls {
		if part.hold(c.GetUserId(), held{call: c, offset: -1}) {
			calls[n] = c
			n++
		}
	}
	calls = calls[:n]
	p.begin(len(calls))
	go func() {
		for i, c := range calls {
			// Counted before it is handed over: a worker may place it and
			// leave the placer idle before enqueue returns.
			p.Stats.Resubmitted.Add(1)
			if p.enqueue(context.Background(), job{part: part, call: c}) != nil {
				p.Stats.Resubmitted.Add(-1)
				for range calls[i+1:] { // given up again
					p.Stats.Queued.Add(-1)
					p.end()
				}
				return
			}
		}
	}()
}

// Run runs the workers until ctx ends, then lets the requests under way
// finish for up to Drain.
func (p *Placer) Run(ctx context.Context) error {
	placing, cut := context.WithCancel(context.WithoutCancel(ctx))
	defer cut()
	var wg sync.WaitGroup
	for range p.cfg.MaxInFlight {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case j := <-p.queue:
					p.Stats.Queued.Add(-1)
					p.handle(placing, j)
					p.end()
				}
			}
		})
	}
	<-ctx.Done()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-p.cfg.Clock.After(p.cfg.Drain):
		p.cfg.Logger.Warn("placements cut off at shutdown; they are placed again at the next start", "placing", p.Stats.Placing.Load())
		cut()
		<-done
	}
	return nil
}

// handle places one call and stores its answer, unless it is no longer
// held. A call another worker of this process places (one given up with
// its partition and held again by its next session) waits for it first.
func (p *Placer) handle(ctx context.Context, j job) {
	id, user := j.call.GetCallId(), j.call.GetUserId()
	busy := user + "\x00" + id
	if !j.part.has(user, id) || !p.claim(ctx, busy) {
		p.Stats.Skipped.Add(1)
		return
	}
	defer p.release(busy)
	if !j.part.has(user, id) || p.answered.has(j.part.id, user, id) {
		// Its status came while another worker placed it, or that worker
		// (of the session before) sent its answer: the answer's record
		// releases it.
		p.Stats.Skipped.Add(1)
		return
	}
	p.Stats.Placing.Add(1)
	defer p.Stats.Placing.Add(-1)
	st := p.place(ctx, j)
	if st == nil {
		return
	}
	p.answered.add(j.part.id, j.call) // before the answer can be recorded
	if !p.store(ctx, j, st) {
		p.answered.take(j.part.id, user, id)
		return
	}
	if st.GetOutcome() == pb.Outcome_OUTCOME_FAILED && st.GetFinal() {
		p.Stats.Failed.Add(1)
	}
}

// claim makes this worker the one placing id, once no other is; false if
// ctx ended first.
func (p *Placer) claim(ctx context.Context, id string) bool {
	for {
		p.mu.Lock()
		ch, ok := p.busy[id]
		if !ok {
			p.busy[id] = make(chan struct{})
			p.mu.Unlock()
			return true
		}
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

func (p *Placer) release(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	close(p.busy[id])
	delete(p.busy, id)
}

// place sends the call until the provider answers it, refuses it for good,
// or its deadline passes. It returns nil when the placer stops or the call
// is no longer held: no answer is stored then. Just before each request
// the number is checked against the do-not-call list: a listed one is not
// placed (answer OUTCOME_SUPPRESSED); a list that cannot be read is waited
// for like a retryable refusal.
func (p *Placer) place(ctx context.Context, j job) *pb.CallStatus {
	c := j.call
	var deadline time.Time
	backoff := p.cfg.MinBackoff
	requests := 0
	for n := 1; ; n++ {
		if p.bucket != nil {
			began := p.cfg.Clock.Now()
			if err := p.bucket.Wait(ctx); err != nil {
				return nil
			}
			if p.cfg.RateWait != nil {
				p.cfg.RateWait.Observe(p.cfg.Clock.Now().Sub(began).Seconds())
			}
			if !j.part.has(c.GetUserId(), c.GetCallId()) {
				// Its status came, its user was forgotten, or its partition
				// went (a rebalance: the next owner places it) while it
				// waited for its token.
				p.Stats.Skipped.Add(1)
				return nil
			}
		}
		now := p.cfg.Clock.Now()
		if n == 1 {
			deadline = now.Add(p.cfg.Deadline)
		} else if !now.Before(deadline) {
			return failed(c, requests, fmt.Errorf("the %v deadline passed waiting to send again", p.cfg.Deadline), now)
		}
		res, err := p.request(ctx, c, now, deadline, &requests)
		if err == nil && res != nil {
			return res
		}
		if ctx.Err() != nil {
			return nil // stopping: the call stays uncommitted in ivr-calls
		}
		re, retry := provider.AsRetryable(err)
		if !retry {
			return failed(c, requests, err, p.cfg.Clock.Now())
		}
		switch {
		case re.Status == 429:
			p.Stats.TooMany.Add(1)
		case re.Status >= 500:
			p.Stats.ServerErrors.Add(1)
		}
		wait := backoff/2 + time.Duration(p.jitter()*float64(backoff/2))
		wait = max(wait, re.RetryAfter)
		backoff = min(2*backoff, p.cfg.MaxBackoff)
		if now = p.cfg.Clock.Now(); !now.Add(wait).Before(deadline) {
			return failed(c, requests, fmt.Errorf("gave up within the %v deadline: %w", p.cfg.Deadline, err), now)
		}
		p.cfg.Logger.Debug("call retried", "call_id", c.GetCallId(), "requests", requests, "after", wait, "err", err)
		select {
		case <-p.cfg.Clock.After(wait):
		case <-ctx.Done():
			return nil
		}
		if !j.part.has(c.GetUserId(), c.GetCallId()) {
			p.Stats.Skipped.Add(1)
			return nil
		}
	}
}

// request checks the call's number against the do-not-call list and, if it
// is not listed, sends one request (counted in requests). It returns the
// answer, or the error to retry or fail on; a list that cannot be read is a
// retryable error.
func (p *Placer) request(ctx context.Context, c *pb.IVRCall, now, deadline time.Time, requests *int) (*pb.CallStatus, error) {
	if p.cfg.Suppressions != nil {
		e, err := p.cfg.Suppressions.Check(c.GetPhone(), c.GetAction().GetCampaignId())
		if err != nil {
			return nil, &provider.RetryableError{Err: fmt.Errorf("the do-not-call list: %w", err)}
		}
		if e != nil {
			p.Stats.Suppressed.Add(1)
			return &pb.CallStatus{CallId: c.GetCallId(), UserId: c.GetUserId(), Outcome: pb.Outcome_OUTCOME_SUPPRESSED, Final: true,
				Detail: suppress.Detail(e), Placement: true, Requests: uint32(*requests), At: timestamppb.New(now),
				TaskId: c.GetTaskId(), Attempt: c.GetAttempt()}, nil
		}
	}
	*requests++
	p.Stats.Requests.Add(1)
	rctx, cancel := context.WithTimeout(ctx, min(p.cfg.CallTimeout, deadline.Sub(now)))
	res, err := p.cfg.Provider.Place(rctx, c)
	cancel()
	if p.cfg.Latency != nil {
		p.cfg.Latency.Observe(p.cfg.Clock.Now().Sub(now).Seconds())
	}
	if err != nil {
		return nil, err
	}
	return &pb.CallStatus{CallId: c.GetCallId(), UserId: c.GetUserId(), Outcome: res.Outcome, Final: res.Final,
		Detail: res.Detail, ProviderCallId: res.ProviderCallID, Placement: true, Requests: uint32(*requests), At: timestamppb.New(p.cfg.Clock.Now()),
		TaskId: c.GetTaskId(), Attempt: c.GetAttempt()}, nil
}

func failed(c *pb.IVRCall, requests int, err error, now time.Time) *pb.CallStatus {
	return &pb.CallStatus{CallId: c.GetCallId(), UserId: c.GetUserId(), Outcome: pb.Outcome_OUTCOME_FAILED, Final: true,
		Detail: fmt.Sprintf("%v (after %d requests)", err, requests), Placement: true, Requests: uint32(requests), At: timestamppb.New(now),
		TaskId: c.GetTaskId(), Attempt: c.GetAttempt()}
}

// store sends the answer to the dialer's loop and waits for Kafka's
// acknowledgement, trying again until it is stored, the partition is given
// up (its next owner places the call again) or the placer stops.
func (p *Placer) store(ctx context.Context, j job, st *pb.CallStatus) bool {
	backoff := 100 * time.Millisecond
	for {
		err := emit(p.cfg.Results, st)
		if err == nil {
			p.Stats.Answered.Add(1)
			return true
		}
		p.cfg.Logger.Error("answer of a placed call not stored; trying again", "call_id", st.GetCallId(), "err", err, "after", backoff)
		select {
		case <-p.cfg.Clock.After(backoff):
		case <-ctx.Done():
			return false
		case <-j.part.done:
			return false
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

func emit(e Emitter, st *pb.CallStatus) error {
	prom, err := e.Emit(st.GetUserId(), st)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	prom.Then(func(err error) { done <- err })
	return <-done
}
