package dialer

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/providers/twilio"
	"github.com/ivrsched/ivrsched/internal/providers/twilio/twiliotest"
)

// lockedBuffer is a log's output written from the placer's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Twilio's 400 quotes the number it refuses. The call fails, and the
// number is in none of the provider's error, the published result and the
// log; its last two digits still tell it apart.
func TestProviderTextQuotingTheNumberIsRedacted(t *testing.T) {
	const number = "+14155550123"
	fake := twiliotest.New(twiliotest.Options{AccountSID: "ACredact", AuthToken: "tok", Invalid: []string{number}})
	defer fake.Close()
	prov, err := twilio.New(twilio.Config{AccountSID: "ACredact", AuthToken: "tok", From: "+14155550100", API: fake.URL,
		PublicURL: "https://ivr.example", ScriptURL: "https://ivr.example/twiml/{script}"})
	if err != nil {
		t.Fatal(err)
	}
	c := call("u1", "c1")
	c.Action = &pb.Action{IvrScript: "welcome"}
	_, perr := prov.Place(context.Background(), c)
	if perr == nil || strings.Contains(perr.Error(), number) || !strings.Contains(perr.Error(), "23") {
		t.Errorf("provider error %v: want a refusal with the number masked", perr)
	}

	var log lockedBuffer
	h := setup(t, prov, 1, func(cfg *Config) { cfg.Logger = slog.New(slog.NewTextHandler(&log, nil)) })
	h.tt.Consume(string(h.topics.Calls), "u1", c)
	h.idle()
	res := h.allResults()
	if len(res) != 1 || res[0].GetOutcome() != pb.Outcome_OUTCOME_FAILED || !strings.Contains(res[0].GetDetail(), "21211") {
		t.Fatalf("results %v, want the call failed with Twilio's 21211", res)
	}
	if strings.Contains(res[0].GetDetail(), number) || len(h.finals) != 1 || strings.Contains(h.finals[0].GetDetail(), number) {
		t.Errorf("the result quotes the number: %q", res[0].GetDetail())
	}
	if !strings.Contains(log.String(), "call failed") || strings.Contains(log.String(), number) {
		t.Errorf("log:\n%s", log.String())
	}
}
