package app

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/gorilla/mux"
	"github.com/lovoo/goka"

	"github.com/ivrsched/ivrsched/processors/scheduler"
)

// Readiness is what /readyz answers: whether every role of this process
// is ready, and for each one that is not, why.
type Readiness struct {
	Ready bool `json:"ready"`
	// NotReady maps a role (scheduler, dialer) to what it waits for.
	NotReady map[string]string `json:"not_ready,omitempty"`
	// Warnings are Config.Warnings: ready, but to be fixed.
	Warnings []string `json:"warnings,omitempty"`
}

// readiness checks every role.
func readiness(roles []*role) Readiness {
	r := Readiness{Ready: true}
	for _, ro := range roles {
		if why := ro.notReady(); why != "" {
			if r.NotReady == nil {
				r.NotReady = map[string]string{}
			}
			r.NotReady[ro.name] = why
			r.Ready = false
		}
	}
	return r
}

// notReady says why the role is not ready, or "" when it is: its current
// processor runs (not restarting after a failure, not taking partitions in
// a rebalance) with every partition it owns restored and, for the
// scheduler, indexed.
func (r *role) notReady() string {
	if r.restarting.Load() {
		return "restarting after a failure"
	}
	p := r.cur.Load()
	if p == nil {
		return "starting"
	}
	st := p.StateReader().State()
	if st != goka.ProcStateRunning && st != goka.ProcStateSetup {
		return "processor " + procState(st)
	}
	why := r.partitionsWait(p)
	if !r.gateOpen() {
		why = append(why, "reading the calling policy and the do-not-call list")
	}
	if st == goka.ProcStateSetup && len(why) == 0 {
		why = append(why, "processor "+procState(st))
	}
	return strings.Join(why, "; ")
}

// partitionsWait says what the processor's owned partitions wait for:
// their restore, the scheduler's due index; nothing when they are ready.
func (r *role) partitionsWait(p *goka.Processor) []string {
	var restoring, unindexed []int32
	for part, ps := range p.Stats().Group {
		switch {
		case ps.TableStats != nil && ps.TableStats.Status != goka.PartitionRunning:
			restoring = append(restoring, part)
		case r.indexed != nil && !r.indexed(part):
			unindexed = append(unindexed, part)
		}
	}
	var why []string
	if len(restoring) > 0 {
		why = append(why, "restoring partitions "+partList(restoring))
	}
	if len(unindexed) > 0 {
		why = append(why, "building the due index of partitions "+partList(unindexed))
	}
	return why
}

// indexBuilt reports whether the scheduler has the due index of an owned
// partition.
func indexBuilt(s *scheduler.Scheduler) func(part int32) bool {
	return func(part int32) bool { return s.Punctuator().Index(part) != nil }
}

func partList(parts []int32) string {
	slices.Sort(parts)
	s := make([]string, len(parts))
	for i, p := range parts {
		s[i] = fmt.Sprint(p)
	}
	return strings.Join(s, ",")
}

func procState(s goka.State) string {
	switch s {
	case goka.ProcStateIdle:
		return "idle"
	case goka.ProcStateStarting:
		return "starting"
	case goka.ProcStateSetup:
		return "taking partitions (rebalance)"
	case goka.ProcStateStopping:
		return "stopping"
	case goka.ProcStateStopped:
		return "stopped"
	}
	return fmt.Sprintf("in state %d", s)
}

// mountHealth serves the probes of an orchestrator such as Kubernetes:
// /healthz answers 200 while the process serves HTTP (liveness: a restore
// of millions of records is no reason to kill it), /readyz 200 when every
// role is ready and 503 otherwise, each with a short JSON body (with the
// configuration's warnings).
func mountHealth(router *mux.Router, roles []*role, warnings []string) {
	router.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "up"})
	})
	router.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		rd := readiness(roles)
		rd.Warnings = warnings
		code := http.StatusOK
		if !rd.Ready {
			code = http.StatusServiceUnavailable
		}
		writeJSON(w, code, rd)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v) // the client went away: nothing to do
}
