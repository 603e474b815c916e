package kafkaclient

import (
	"errors"
	"sync/atomic"

	"github.com/IBM/sarama"
)

// earlyClaims lets Sarama start a group session's partition consumers while
// Goka's Setup restores the session's partitions, instead of after it.
//
// Goka's Setup (the handler's Setup) opens every assigned partition's table,
// restores what its local store lacks from the changelog and, for the
// scheduler, builds the due index; it returns when all of them are done.
// Sarama starts the input partition consumers only after Setup returns, and
// each new partition consumer waits for Sarama's subscription batching
// (100 ms, a constant of Sarama) and two offset requests before its first
// fetch. So the first input record (a tick, after a restart) was processed
// at least 100 ms after the last partition was restored. Here Setup starts
// Goka's Setup and returns at once; each ConsumeClaim waits for it (and for
// gate) before it hands the claim to Goka, so no callback runs before every
// partition is restored, as before, while the consumers' start-up overlaps
// the restore.
//
// A failed Setup is reported by Cleanup, which Sarama calls when the
// session ends, so Consume returns it as it returned a failed Setup; every
// ConsumeClaim returns at once then, which ends the session.
//
// Sarama calls Setup, then ConsumeClaim from one goroutine per claim, then
// Cleanup once those returned; sessions of one consumer group follow each
// other, so one earlyClaims serves them all.
type earlyClaims struct {
	sarama.ConsumerGroupHandler // Goka's processor
	// gate, if not nil, is closed when callbacks may run (the calling
	// policy has been read): claims wait for it too.
	gate <-chan struct{}
	cur  atomic.Pointer[setupRun]
}

// setupRun is one session's Setup running in the background.
type setupRun struct {
	done chan struct{}
	err  error // written before done is closed
}

func (e *earlyClaims) Setup(sess sarama.ConsumerGroupSession) error {
	run := &setupRun{done: make(chan struct{})}
	e.cur.Store(run)
	go func() {
		defer close(run.done)
		run.err = e.ConsumerGroupHandler.Setup(sess)
	}()
	return nil
}

func (e *earlyClaims) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	run := e.cur.Load()
	select {
	case <-run.done:
	case <-sess.Context().Done():
		return nil
	}
	if run.err != nil {
		return nil // Cleanup reports it
	}
	if e.gate != nil {
		select {
		case <-e.gate:
		case <-sess.Context().Done():
			return nil
		}
	}
	return e.ConsumerGroupHandler.ConsumeClaim(sess, claim)
}

// Cleanup waits for the session's Setup (a claim may have ended the session
// before it finished) and ends the session in Goka; it returns the Setup's
// error with Goka's.
func (e *earlyClaims) Cleanup(sess sarama.ConsumerGroupSession) error {
	run := e.cur.Load()
	if run == nil {
		return e.ConsumerGroupHandler.Cleanup(sess)
	}
	<-run.done
	return errors.Join(run.err, e.ConsumerGroupHandler.Cleanup(sess))
}
