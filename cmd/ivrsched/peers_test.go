package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"

	"github.com/ivrsched/ivrsched/internal/admin"
	"github.com/ivrsched/ivrsched/topology"
)

// rogueMember joins the scheduler's consumer group announcing adminURL,
// until the test ends; it returns once the member has its partitions.
func rogueMember(t *testing.T, ctx context.Context, broker, adminURL string) {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{goka.CopartitioningStrategy}
	cfg.Consumer.Group.Member.UserData = admin.Announcement{URL: adminURL}.Encode()
	topics := topology.NewTopics("")
	group, err := sarama.NewConsumerGroup([]string{broker}, string(topics.Scheduler), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	joined := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			_ = group.Consume(ctx, []string{string(topics.Onboarding)}, rogueHandler{joined})
		}
	}()
	t.Cleanup(func() { cancel(); <-done; group.Close() })
	select {
	case <-joined:
	case <-time.After(30 * time.Second):
		t.Fatal("the rogue member got no partitions")
	}
}

type rogueHandler struct{ joined chan struct{} }

func (h rogueHandler) Setup(s sarama.ConsumerGroupSession) error {
	if len(s.Claims()[string(topology.NewTopics("").Onboarding)]) > 0 {
		select {
		case h.joined <- struct{}{}:
		default:
		}
	}
	return nil
}
func (rogueHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (rogueHandler) ConsumeClaim(s sarama.ConsumerGroupSession, _ sarama.ConsumerGroupClaim) error {
	<-s.Context().Done()
	return nil
}

// A member of the scheduler's group that announces a URL with a fragment
// (the review's `http://127.0.0.1:…/latest/meta-data/iam#`) is not
// fetched, by the page nor by the CLI, and nothing a peer answers is shown.
func TestARogueAnnouncementIsNotFetched(t *testing.T) {
	var hits atomic.Int32
	rogue := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		http.Error(w, "SECRET-IAM-CREDENTIALS", http.StatusForbidden)
	}))
	defer rogue.Close()
	r := startRun(t)
	r.awaitReady()
	rogueMember(t, r.ctx, r.broker, rogue.URL+"/latest/meta-data/iam#")
	_, page := r.get("/ui/", false)
	_, stderr := r.cliCode("upcoming")
	if n := hits.Load(); n != 0 || strings.Contains(page, "SECRET") || strings.Contains(stderr, "SECRET") {
		t.Fatalf("the rogue URL was fetched %d times; page:\n%s\nupcoming: %s", n, page, stderr)
	}
	r.stop()
}
