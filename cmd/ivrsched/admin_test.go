package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The admin CLI on `ivrsched run`: `upcoming` lists the next follow-ups in
// firing order, found through the scheduler group's member metadata (no
// address given), filtered by campaign and time; `show` prints a user's
// follow-ups with requested and effective times and the phone masked, and
// the call placed for a user whose follow-up fired, with the phone in full
// (--show-phone, the instance and the CLI given the admin token).
func TestUpcomingAndShow(t *testing.T) {
	t.Setenv(adminTokenEnv, "a-test-admin-token-16")
	r := startRun(t)
	cli := r.cli
	for i := 0; i < 8; i++ {
		campaign := "spring"
		if i%2 == 1 {
			campaign = "autumn"
		}
		cli("onboard", "--user", fmt.Sprintf("u-%d", i), "--phone", fmt.Sprintf("+1415555%04d", i), "--task", "t", "--campaign", campaign, "--delay", fmt.Sprintf("%dh", 10-i))
	}
	cli("onboard", "--user", "now", "--phone", "+14155559999", "--task", "t", "--delay", "0s")
	if calls := cli("calls", "--limit", "1"); !strings.Contains(calls, `"user_id":"now"`) {
		t.Fatalf("calls: %s", calls)
	}

	type up struct {
		UserID   string    `json:"user_id"`
		DueAt    time.Time `json:"due_at"`
		Campaign string    `json:"campaign"`
	}
	parse := func(out string) []up {
		var us []up
		sc := bufio.NewScanner(strings.NewReader(out))
		for sc.Scan() {
			var u up
			if err := json.Unmarshal(sc.Bytes(), &u); err != nil {
				t.Fatalf("line %q: %v", sc.Text(), err)
			}
			us = append(us, u)
		}
		return us
	}
	// The onboardings are applied in order: wait for the last one.
	var got []up
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) { // no event to await
		if got = parse(cli("upcoming", "--limit", "3")); len(got) == 3 && got[0].UserID == "u-7" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("upcoming --limit 3: %+v", got)
		}
	}
	if got[1].UserID != "u-6" || got[2].UserID != "u-5" || !got[0].DueAt.Before(got[1].DueAt) {
		t.Fatalf("upcoming --limit 3 not the next three in order: %+v", got)
	}
	spring := parse(cli("upcoming", "--campaign", "spring", "--limit", "10"))
	if len(spring) != 4 || spring[0].UserID != "u-6" || spring[3].UserID != "u-0" {
		t.Fatalf("upcoming --campaign spring: %+v", spring)
	}
	window := parse(cli("upcoming", "--from", time.Now().Add(4*time.Hour+30*time.Minute).Format(time.RFC3339), "--to", time.Now().Add(6*time.Hour+30*time.Minute).Format(time.RFC3339)))
	if len(window) != 2 || window[0].UserID != "u-5" || window[1].UserID != "u-4" {
		t.Fatalf("upcoming --from +4h30m --to +6h30m: %+v", window)
	}

	show := cli("show", "--user", "u-3")
	var st struct {
		Partition int32 `json:"partition"`
		Scheduler struct {
			Phone   string `json:"phone"`
			Pending []struct {
				TaskID      string    `json:"task_id"`
				DueAt       time.Time `json:"due_at"`
				RequestedAt time.Time `json:"requested_at"`
			} `json:"pending"`
		} `json:"scheduler"`
	}
	if err := json.Unmarshal([]byte(show), &st); err != nil {
		t.Fatalf("show: %v\n%s", err, show)
	}
	if st.Scheduler.Phone != "+•••••••••03" || len(st.Scheduler.Pending) != 1 || st.Scheduler.Pending[0].RequestedAt.IsZero() || st.Scheduler.Pending[0].DueAt.IsZero() {
		t.Fatalf("show --user u-3:\n%s", show)
	}
	// The dialer's table has the call placed for "now" (placed once the
	// log provider answered).
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) { // no event to await
		show = cli("show", "--user", "now", "--show-phone")
		if strings.Contains(show, `"outcome"`) && strings.Contains(show, "+14155559999") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("show --user now has no placed call:\n%s", show)
		}
	}
	// run-now fires u-0's follow-up, due in 10 h, at once.
	cli("run-now", "--user", "u-0", "--task", "t")
	if calls := cli("calls", "--limit", "2", "--since", "1m"); !strings.Contains(calls, `"user_id":"u-0"`) {
		t.Fatalf("run-now: no call for u-0: %s", calls)
	}
	r.stop()
}
