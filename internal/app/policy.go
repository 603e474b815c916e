package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"

	"github.com/lovoo/goka"
	gokacodec "github.com/lovoo/goka/codec"
	"github.com/lovoo/goka/storage"

	"github.com/ivrsched/ivrsched/internal/policy"
)

// policyView keeps the calling policy in force: a Goka view of the
// ivr-policies topic, decoded once per change. Every scheduler instance
// runs one; `ivrsched policy set` writes the topic.
//
// Current is safe for concurrent use: every partition goroutine of the
// scheduler calls it, for every command and tick.
type policyView struct {
	view     *goka.View
	fallback *policy.Policy
	cur      atomic.Pointer[policy.Policy] // nil: the topic holds none
	log      *slog.Logger
}

func newPolicyView(cfg Config, log *slog.Logger) (*policyView, error) {
	pv := &policyView{fallback: cfg.DefaultPolicy, log: log}
	opts := append(cfg.Kafka.ViewOptions(),
		goka.WithViewStorageBuilder(storage.MemoryBuilder()), // one key; no files to lock
		goka.WithViewCallback(pv.update),
		goka.WithViewAutoReconnect(), // a lost broker is waited out, not fatal
		goka.WithViewLogger(gokaLogger{log}),
		goka.WithViewClientID(cfg.Kafka.ClientID+"-policy"),
	)
	v, err := goka.NewView(cfg.Kafka.Brokers, cfg.Topics.Policies, new(gokacodec.Bytes), opts...)
	if err != nil {
		return nil, fmt.Errorf("policy view: %w", err)
	}
	pv.view = v
	return pv, nil
}

// Run keeps the view current until ctx ends.
func (pv *policyView) Run(ctx context.Context) error {
	if err := pv.view.Run(ctx); err != nil {
		return fmt.Errorf("policy view: %w", err)
	}
	return nil
}

// Ready is closed once the view has read the topic up to its end, so the
// scheduler does not place a follow-up under the fallback while a policy
// is set.
func (pv *policyView) Ready() <-chan struct{} { return pv.view.WaitRunning() }

// Current is the policy in force: the topic's, else the fallback (nil: no
// policy).
func (pv *policyView) Current() *policy.Policy {
	if p := pv.cur.Load(); p != nil {
		return p
	}
	return pv.fallback
}

// update stores a record of the topic and decodes the policy. A value that
// does not decode (written by another tool than `ivrsched policy set`)
// leaves the policy in force as it is, with an error in the log.
func (pv *policyView) update(ctx goka.UpdateContext, s storage.Storage, key string, value []byte) error {
	if err := goka.DefaultUpdate(ctx, s, key, value); err != nil {
		return err
	}
	if key != policy.Key {
		pv.log.Warn("ivr-policies: record under an unknown key ignored", "key", key, "offset", ctx.Offset())
		return nil
	}
	if value == nil {
		pv.cur.Store(nil)
		pv.log.Info("calling policy removed; the default applies", "offset", ctx.Offset(), "default", version(pv.fallback))
		return nil
	}
	p, err := policy.Decode(value)
	if err != nil {
		pv.log.Error("ivr-policies holds a policy that does not parse; the one in force stays", "offset", ctx.Offset(), "in_force", version(pv.Current()), "err", err)
		return nil
	}
	if old := pv.cur.Swap(p); old == nil || old.Version() != p.Version() {
		pv.log.Info("calling policy", "version", p.Version(), "offset", ctx.Offset())
	}
	return nil
}

func version(p *policy.Policy) string {
	if p == nil {
		return "none"
	}
	return p.Version()
}

// policyPage serves the policy this instance applies (GET /policy): its
// version on the first line, then its canonical encoding, indented, or a
// line saying that none applies.
func policyPage(current func() *policy.Policy) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		p := current()
		if p == nil {
			fmt.Fprintln(w, "# no calling policy: every follow-up fires at its requested time")
			return
		}
		var b bytes.Buffer
		_ = json.Indent(&b, p.Encode(), "", "  ")
		fmt.Fprintf(w, "# calling policy in force, version %s\n%s\n", p.Version(), b.String())
	}
}
