package app

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/IBM/sarama"
	"github.com/gorilla/mux"
	"github.com/lovoo/goka"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/admin"
	"github.com/ivrsched/ivrsched/internal/deadletter"
	"github.com/ivrsched/ivrsched/internal/explain"
	"github.com/ivrsched/ivrsched/internal/webui"
)

// mountUI serves ivrsched's own web page (package webui) at /ui/; its
// actions' wrong tokens count in attempts.
func mountUI(r *mux.Router, cfg Config, run *Running, attempts *admin.Attempts) {
	client := adminClient(cfg)
	src := webui.Source{
		Upcoming: func(ctx context.Context) ([]admin.Upcoming, error) {
			up, _, err := client.Upcoming(ctx, admin.UpcomingQuery{Limit: 20}, nil)
			return up, err
		},
		User: client.User,
		Explain: func(ctx context.Context, id string) (explain.Trail, error) {
			now := cfg.now() // the page reads a day; explain --since reads further
			return client.Explain(ctx, id, now.Add(-24*time.Hour), now, nil)
		},
		Results:     func(ctx context.Context) ([]*pb.CallResult, error) { return recentResults(ctx, cfg, 20) },
		DeadLetters: newDeadLetterCache(func(ctx context.Context) (map[string]int, error) { return deadLetterCounts(ctx, cfg, 24*time.Hour) }, cfg.Clock).get,
		RunNow: func(ctx context.Context, user, task string) error {
			em, err := goka.NewEmitter(cfg.Kafka.Brokers, cfg.Topics.Onboarding, new(codec.Command), cfg.Kafka.EmitterOptions()...)
			if err != nil {
				return fmt.Errorf("produce to %s: %w", cfg.Topics.Onboarding, err)
			}
			err = em.EmitSync(user, &pb.Command{UserId: user, RequestedAt: timestamppb.Now(), Command: &pb.Command_RunNow{RunNow: &pb.RunNow{TaskId: task}}})
			if ferr := em.Finish(); err == nil {
				err = ferr
			}
			return err
		},
		Pause: func(ctx context.Context, campaign string, until *time.Time) error {
			_, err := client.SetPause(ctx, campaign, until)
			return err
		},
		Suppressions: suppressionAPI(cfg, attempts),
		Token:        cfg.AdminToken,
		Attempts:     attempts,
		Logger:       cfg.logger(),
	}
	chartSources(&src, cfg, client, run)
	if run.Policy != nil {
		src.Paused = func() map[string]time.Time {
			out := map[string]time.Time{}
			p := run.Policy()
			if p == nil {
				return out
			}
			now := time.Now()
			if u := p.Default.PausedUntil; u != nil && u.After(now) {
				out["(every campaign)"] = *u
			}
			for c, rules := range p.Campaigns {
				if u := rules.PausedUntil; u != nil && u.After(now) {
					out[c] = *u
				}
			}
			return out
		}
	}
	r.PathPrefix("/ui/").Handler(webui.Handler(src))
}

// adminClient is the client of the deployment's instances that this
// process's page and admin API use.
func adminClient(cfg Config) *admin.Client {
	return &admin.Client{Kafka: cfg.Kafka, Topics: cfg.Topics, Token: cfg.AdminToken, Peers: cfg.AdminPeers}
}

// recentResults reads the last few results of each partition of the
// results topic, newest first, at most n.
func recentResults(ctx context.Context, cfg Config, n int) ([]*pb.CallResult, error) {
	client, err := cfg.Kafka.Connect(ctx)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	topic := string(cfg.Topics.Results)
	parts, err := client.Partitions(topic)
	if err != nil {
		return nil, fmt.Errorf("partitions of %s: %w", topic, err)
	}
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	defer consumer.Close()
	per := int64(max(1, n/len(parts)+1))
	var out []*pb.CallResult
	for _, p := range parts {
		end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return nil, fmt.Errorf("end of %s/%d: %w", topic, p, err)
		}
		start, err := client.GetOffset(topic, p, sarama.OffsetOldest)
		if err != nil {
			return nil, fmt.Errorf("start of %s/%d: %w", topic, p, err)
		}
		from := max(start, end-per)
		if from >= end {
			continue
		}
		pc, err := consumer.ConsumePartition(topic, p, from)
		if err != nil {
			return nil, fmt.Errorf("consume %s/%d: %w", topic, p, err)
		}
		for off := from; off < end; {
			select {
			case m := <-pc.Messages():
				off = m.Offset + 1
				res := new(pb.CallResult)
				if proto.Unmarshal(m.Value, res) == nil {
					out = append(out, res)
				}
			case err := <-pc.Errors():
				pc.Close()
				return nil, fmt.Errorf("consume %s/%d: %w", topic, p, err)
			case <-ctx.Done():
				pc.Close()
				return nil, ctx.Err()
			}
		}
		pc.Close()
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].GetAt().AsTime().After(out[j].GetAt().AsTime()) })
	if len(out) > n {
		out = out[:n]
	}
	return out, nil
}

// deadLetterCounts counts the dead letters of the last d by reason.
func deadLetterCounts(ctx context.Context, cfg Config, d time.Duration) (map[string]int, error) {
	client, err := cfg.Kafka.Connect(ctx)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	counts := map[string]int{}
	err = deadletter.Scan(ctx, client, []string{string(cfg.Topics.SchedulerDLQ), string(cfg.Topics.DialerDLQ)},
		deadletter.Filter{Since: time.Now().Add(-d)}, nil, nil, func(e deadletter.Entry) error {
			counts[e.Letter.GetReason()]++
			return nil
		})
	return counts, err
}
