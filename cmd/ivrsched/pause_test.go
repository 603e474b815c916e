package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// pause and resume on `ivrsched run`: a paused campaign's follow-up is held
// (deferred to the pause's end, reason paused) while another campaign's
// fires; resume makes it fire at once.
func TestPauseHoldsAndResumeFires(t *testing.T) {
	r := startRun(t)
	cli, inForce := r.cli, r.awaitPolicy
	if code, errs := r.cliCode("pause", "--campaign", "promo"); code != 2 || !strings.Contains(errs, "no calling policy is set") {
		t.Fatalf("pause without a policy: exit %d, %s", code, errs)
	}
	r.setPolicy("default:\n  open_hours: [{days: [mon, tue, wed, thu, fri, sat, sun], from: \"00:00\", to: \"24:00\"}]\n")
	inForce(cli("pause", "--campaign", "promo", "--for", "1h"))

	cli("onboard", "--user", "p", "--phone", "+14155550100", "--task", "t", "--campaign", "promo", "--delay", "1s")
	cli("onboard", "--user", "o", "--phone", "+14155550101", "--task", "t", "--campaign", "other", "--delay", "1s")
	if calls := cli("calls", "--limit", "1"); !strings.Contains(calls, `"user_id":"o"`) {
		t.Fatalf("calls: %s", calls)
	}
	var st struct {
		Scheduler struct {
			Pending []struct {
				Deferred string    `json:"deferred"`
				DueAt    time.Time `json:"due_at"`
			} `json:"pending"`
		} `json:"scheduler"`
	}
	if err := json.Unmarshal([]byte(cli("show", "--user", "p")), &st); err != nil {
		t.Fatal(err)
	}
	if p := st.Scheduler.Pending; len(p) != 1 || p[0].Deferred != "paused" || p[0].DueAt.Before(time.Now().Add(59*time.Minute)) {
		t.Fatalf("the paused campaign's follow-up: %+v", p)
	}

	inForce(cli("resume", "--campaign", "promo"))
	if calls := cli("calls", "--limit", "2", "--since", "1m"); !strings.Contains(calls, `"user_id":"p"`) {
		t.Fatalf("resume: no call for the held follow-up: %s", calls)
	}
	if code, _ := r.cliCode("resume", "--campaign", "promo"); code != 2 {
		t.Fatalf("resume of a campaign not paused: exit %d", code)
	}
	r.stop()
}
