package app

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/ivrsched/ivrsched/internal/kafkaclient"
	"github.com/ivrsched/ivrsched/topology"
)

// SASL PLAIN without TLS, accepted with AllowPlainWithoutTLS
// (--insecure-sasl-plain), is not accepted silently: Run logs a warning at
// start, and /readyz lists it.
func TestPlainWithoutTLSIsWarned(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser(kafkaclient.SASLPlain, "plain-user", "plain-secret"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var logs bytes.Buffer // read once Run has ended
	web := freeAddr(t)
	cfg := Config{
		SuppressionKey: testSuppressionKey,
		Kafka: kafkaclient.Kafka{Hasher: topology.Murmur2(), Brokers: c.ListenAddrs(), Partitions: 2, Replication: 1, FlushFrequency: time.Millisecond,
			Security: kafkaclient.Security{SASL: kafkaclient.SASL{Mechanism: kafkaclient.SASLPlain, User: "plain-user", Password: "plain-secret"}, AllowPlainWithoutTLS: true}},
		Topics:  topology.NewTopics("plain-"),
		DataDir: t.TempDir(),
		HTTP:    web,
		Logger:  slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	ctx, cancel := context.WithCancel(context.Background())
	started, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- Run(ctx, cfg, Roles{Scheduler: true}, func(*Running) { close(started) }) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	defer stop()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("run: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("not started after 30s")
	}
	const want = "SASL PLAIN without TLS"
	resp, err := http.Get("http://" + web + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var r Readiness
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("/readyz %q: %v", body, err)
	}
	found := false
	for _, w := range r.Warnings {
		found = found || strings.Contains(w, want)
	}
	if !found {
		t.Errorf("/readyz's warnings %q do not mention %s", r.Warnings, want)
	}
	stop()
	if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, want) {
		t.Errorf("the log at start has no warning about %s:\n%s", want, l)
	}
}
