package ivrsched

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/IBM/sarama"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ivrsched/ivrsched/codec/ivrschedpb"
)

// WithSuppressions has the system start with n entries on its do-not-call
// list, none of them the number the benchmark calls: what a large list
// costs each fire and each placement, which check it. Only for the modes
// that serve /readyz (not Processes).
func (s *System) WithSuppressions(n int) *System {
	s.suppressions = n
	return s
}

// fillSuppressions writes the entries under random keys (64 hex digits, as
// the keyed hash of a number is), then restarts the processes, which read
// the whole list before they fire or place anything, and waits until they
// are ready.
func (s *System) fillSuppressions(ctx context.Context) error {
	if s.suppressions == 0 {
		return nil
	}
	if s.web == "" {
		return fmt.Errorf("%s: a do-not-call list needs a mode with /readyz", s.name)
	}
	value, err := proto.Marshal(&ivrschedpb.Suppression{Reason: "ivrbench", AddedAt: timestamppb.Now(),
		Source: ivrschedpb.Suppression_SOURCE_PRODUCER})
	if err != nil {
		return err
	}
	rng := rand.NewChaCha8([32]byte{}) // the same keys in every run
	began := time.Now()
	err = s.produce(ctx, s.suppressions, func(int) (*sarama.ProducerMessage, error) {
		var k [32]byte
		_, _ = rng.Read(k[:])
		return &sarama.ProducerMessage{Topic: string(s.topics.Suppressions), Key: sarama.StringEncoder(hex.EncodeToString(k[:])),
			Value: sarama.ByteEncoder(value)}, nil
	})
	if err != nil {
		return fmt.Errorf("%s: fill the do-not-call list: %w", s.name, err)
	}
	written := time.Since(began)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.procs {
		if err := p.p.Stop(30 * time.Second); err != nil {
			return fmt.Errorf("%s: restart after filling the list: %w", s.name, err)
		}
		if err := s.launch(p); err != nil {
			return err
		}
	}
	restarted := time.Now()
	if err := s.awaitReady(ctx, 120*time.Second); err != nil {
		return err
	}
	if s.env.Log != nil {
		s.env.Log.Info("do-not-call list filled", "system", s.name, "entries", s.suppressions,
			"written_in", written.Round(time.Millisecond), "ready_after_restart", time.Since(restarted).Round(time.Millisecond))
	}
	return nil
}

// awaitReady polls /readyz until it answers 200.
func (s *System) awaitReady(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	last := ""
	for {
		resp, err := http.Get("http://" + s.web + "/readyz")
		if err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, b)
		} else {
			last = err.Error()
		}
		for _, p := range s.procs {
			select {
			case <-p.p.Exited():
				return fmt.Errorf("ivrsched %s exited; see its log in %s", p.args[0], s.env.WorkDir)
			default:
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not ready within %v of its restart (/readyz: %s)", s.name, within, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
