package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lovoo/goka/storage"

	"github.com/ivrsched/ivrsched/internal/kafkaclient"
	"github.com/ivrsched/ivrsched/topology"
)

// A user lookup that reaches a partition whose table Goka is still
// setting up (its store not yet opened) answers 503 "not ready:
// partitions recovering", on the admin API, and Goka's query page says so,
// instead of a nil dereference inside Goka's Get that net/http turns into
// a closed connection.
func TestUserLookupWhileRecoveringIsNotReady(t *testing.T) {
	b, err := StartEmbedded("127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	adminAddr := freeAddr(t)
	cfg := Config{
		SuppressionKey: testSuppressionKey,
		Kafka:          kafkaclient.Kafka{Hasher: topology.Murmur2(), Brokers: []string{b.Addr()}, Partitions: 4, Replication: 1, FlushFrequency: time.Millisecond},
		Topics:         topology.NewTopics("notready-"),
		DataDir:        t.TempDir(),
		AdminHTTP:      adminAddr, // loopback, no token: phones masked
		Provider:       &placed{n: make(chan struct{}, 10)},
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	// Partition 0's store is opened only once the test has asked.
	opening, release := make(chan struct{}), make(chan struct{})
	var held atomic.Bool
	cfg.wrapSchedulerStorage = func(inner storage.Builder) storage.Builder {
		return func(topic string, part int32) (storage.Storage, error) {
			if topic == string(cfg.Topics.SchedulerTable()) && part == 0 && held.CompareAndSwap(false, true) {
				close(opening)
				<-release
			}
			return inner(topic, part)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, Roles{Scheduler: true}, nil) }()
	defer func() {
		cancel()
		select {
		case <-release:
		default:
			close(release)
		}
		<-done
	}()
	select {
	case <-opening:
	case err := <-done:
		t.Fatalf("run: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the scheduler never opened partition 0's store")
	}

	user := ""
	for i := 0; user == ""; i++ {
		if id := fmt.Sprintf("user-%d", i); topology.Partition(id, 4) == 0 {
			user = id
		}
	}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + adminAddr + path)
		if err != nil {
			t.Fatalf("GET %s while partition 0 opens its store: %v", path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	const why = "not ready: partitions recovering"
	if code, body := get("/admin/user/" + user); code != http.StatusServiceUnavailable || !strings.Contains(body, why) {
		t.Errorf("/admin/user/%s while its partition opens its store = %d %q; want 503 %q", user, code, body, why)
	}
	if code, body := get("/query/" + string(cfg.Topics.SchedulerTable()) + "/" + user); code != http.StatusOK || !strings.Contains(body, why) {
		t.Errorf("Goka's query page for %s while its partition opens its store = %d; want the page saying %q:\n%s", user, code, why, body)
	}
}
