package scheduler

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/deadletter"
)

// logBuffer is the scheduler's log, written from the processor's goroutine.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A refused phone number is masked in the dead letter's detail and in the
// WARN log line, which still say what was wrong; the dead letter's value,
// the command itself, keeps the number for a replay.
func TestDeadLetterDetailMasksThePhone(t *testing.T) {
	var log logBuffer
	h := newHarness(t, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&log, nil)) })
	for _, c := range []struct{ phone, clear, masked, why string }{
		{"+19005550199", "9005550", "+•••••••••99", "premium-rate"},
		{"+15553", "1555", "+•••53", "too short"},
	} {
		h.send("u1", &pb.Command{UserId: "u1", Command: &pb.Command_Onboard{Onboard: &pb.Onboard{Phone: c.phone, TimeZone: "Europe/Berlin"}}})
		dls := h.deadLetters()
		if len(dls) != 1 || dls[0].GetReason() != string(deadletter.ReasonInvalidPhone) {
			t.Fatalf("%s: dead letters %v, want one invalid_phone", c.phone, dls)
		}
		d := dls[0].GetDetail()
		if strings.Contains(d, c.clear) || !strings.Contains(d, c.masked) || !strings.Contains(d, c.why) {
			t.Errorf("%s: detail %q, want %q and %q, and not %q", c.phone, d, c.masked, c.why, c.clear)
		}
		if !bytes.Contains(dls[0].GetValue(), []byte(c.phone)) {
			t.Errorf("%s: the dead letter's value lost the command's number", c.phone)
		}
		if out := log.String(); strings.Contains(out, c.clear) || !strings.Contains(out, c.masked) {
			t.Errorf("%s: log %q, want %q and not %q", c.phone, out, c.masked, c.clear)
		}
	}
}
