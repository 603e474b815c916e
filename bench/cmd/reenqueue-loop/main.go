// Command reenqueue-loop is the seeds' Kafka "re-enqueue until due" consumer
// loop, a baseline for the benchmark: a consumer group reads the delay
// topic; a record that is due is produced to the target topic, one that is
// not is produced to the delay topic again, at once (--variant immediate)
// or after holding it for min(remaining, --hold) (--variant hold60s).
// Offsets are committed once the produce is acknowledged: at least once.
//
// On SIGTERM or SIGINT it stops cleanly and prints one summary line:
//
//	reenqueue-loop summary: variant=immediate consumed=... reproduced=... fired=... ...
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/ivrsched/ivrsched/bench/systems/reenqueue"
)

func main() {
	var (
		brokers     = flag.String("brokers", "127.0.0.1:9092", "Kafka bootstrap servers, comma-separated")
		delayTopic  = flag.String("delay-topic", "reenqueue-delay", "topic of records not yet due")
		targetTopic = flag.String("target-topic", "reenqueue-target", "topic that due records go to")
		group       = flag.String("group", "reenqueue-loop", "consumer group")
		variant     = flag.String("variant", reenqueue.Immediate, "immediate | hold60s")
		hold        = flag.Duration("hold", 60*time.Second, "longest hold of a record not yet due (hold60s)")
		clientID    = flag.String("client-id", "", "Kafka client id (default reenqueue-loop-<pid>)")
		session     = flag.Duration("session-timeout", 0, "consumer group session timeout (default sarama's 10s)")
		statsEvery  = flag.Duration("stats-every", 0, "log the counts this often (0: only at exit)")
	)
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if *variant != reenqueue.Immediate && *variant != reenqueue.Hold60s {
		fmt.Fprintf(os.Stderr, "reenqueue-loop: --variant must be %s or %s, not %q\n", reenqueue.Immediate, reenqueue.Hold60s, *variant)
		os.Exit(2)
	}
	if *clientID == "" {
		*clientID = fmt.Sprintf("reenqueue-loop-%d", os.Getpid())
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	began := time.Now()
	cfg := reenqueue.LoopConfig{
		Brokers:        strings.Split(*brokers, ","),
		DelayTopic:     *delayTopic,
		TargetTopic:    *targetTopic,
		Group:          *group,
		ClientID:       *clientID,
		Variant:        *variant,
		Hold:           *hold,
		SessionTimeout: *session,
		Log:            log,
	}
	stats, err := reenqueue.RunLoop(ctx, cfg, func(l *reenqueue.Loop) {
		log.Info("reenqueue-loop: running", "variant", *variant, "group", *group,
			"delay_topic", *delayTopic, "target_topic", *targetTopic, "client_id", *clientID)
		if *statsEvery > 0 {
			go func() {
				t := time.NewTicker(*statsEvery)
				defer t.Stop()
				for {
					select {
					case <-ctx.Done():
						return
					case <-t.C:
						log.Info("reenqueue-loop: stats " + l.Stats().String())
					}
				}
			}()
		}
	})
	fmt.Printf("reenqueue-loop summary: variant=%s %s uptime=%s\n",
		*variant, stats, time.Since(began).Round(time.Millisecond))
	if err != nil {
		log.Error("reenqueue-loop", "err", err)
		os.Exit(1)
	}
}
