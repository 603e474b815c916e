package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/explain"
)

// Explain reads what the deployment recorded about user from since on
// (the user's partition of each topic, explain.Read) and asks the
// instances that own the user's partition for the user's values now,
// and builds the user's decision trail. A failure to get the values (no
// instance owns the partition, a 401) is a note of the trail, not an
// error. now is the time of the read; progress as for explain.Read.
func (c *Client) Explain(ctx context.Context, user string, since, now time.Time, progress func(read, total int64)) (explain.Trail, error) {
	client, err := c.Kafka.Connect(ctx)
	if err != nil {
		return explain.Trail{}, err
	}
	f, err := explain.Read(ctx, client, c.Topics, user, since, now, progress)
	client.Close()
	if err != nil {
		return explain.Trail{}, err
	}
	v, err := c.User(ctx, user)
	switch {
	case err != nil:
		f.Notes = append(f.Notes, fmt.Sprintf("the tables' values now were not read (%v): pending follow-ups are not shown", err))
	default:
		if v.SchedulerURL == "" {
			f.Notes = append(f.Notes, "no scheduler instance with an admin listener owns the user's partition now: pending follow-ups are not shown")
		}
		if v.SchedulerUnreadable != "" {
			f.Notes = append(f.Notes, "the scheduler's "+v.SchedulerUnreadable)
		}
		if v.DialerUnreadable != "" {
			f.Notes = append(f.Notes, "the dialer's "+v.DialerUnreadable)
		}
		if len(v.Scheduler) > 0 {
			st := new(pb.UserState)
			if err := protojson.Unmarshal(v.Scheduler, st); err != nil {
				f.Notes = append(f.Notes, fmt.Sprintf("the scheduler's value from %s does not parse: %v", v.SchedulerURL, err))
			} else {
				f.Scheduler = st
			}
		}
		if len(v.Dialer) > 0 {
			d := new(pb.DialerState)
			if err := protojson.Unmarshal(v.Dialer, d); err != nil {
				f.Notes = append(f.Notes, fmt.Sprintf("the dialer's value from %s does not parse: %v", v.DialerURL, err))
			} else {
				f.Dialer = d
			}
		}
	}
	return explain.Build(f), nil
}

// ParseSince reads explain's start: a duration back from now ("72h",
// "7d") or an RFC 3339 time, at most explain.MaxSince back.
func ParseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return now.Add(-explain.DefaultSince), nil
	}
	var since time.Time
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		since = t
	} else {
		d, err := parseDays(s)
		if err != nil || d <= 0 {
			return time.Time{}, fmt.Errorf("%q: want a duration above 0 such as 24h or 7d, or an RFC 3339 time", s)
		}
		since = now.Add(-d)
	}
	if since.Before(now.Add(-explain.MaxSince)) {
		return time.Time{}, fmt.Errorf("%q: at most %s back (the dead-letter topics' retention; onboarding keeps 7 days)", s, "30d")
	}
	return since, nil
}

// parseDays is time.ParseDuration with a "d" suffix of whole days.
func parseDays(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		var days int
		if _, err := fmt.Sscanf(n, "%d", &days); err != nil || fmt.Sprint(days) != n {
			return 0, fmt.Errorf("not a number of days: %q", s)
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}

// ExplainHandler serves GET /api/explain?user=U[&task=T][&since=S]: the
// user's decision trail as JSON (explain.Trail), built by c at the time
// now gives. It holds no phone number. The admin listener serves it
// behind the admin token, like the rest of the admin API.
func ExplainHandler(c *Client, now func() time.Time) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			http.Error(w, "want GET", http.StatusMethodNotAllowed)
			return
		}
		q := r.URL.Query()
		user := q.Get("user")
		if user == "" {
			http.Error(w, "want ?user=<user id>", http.StatusBadRequest)
			return
		}
		at := now()
		since, err := ParseSince(q.Get("since"), at)
		if err != nil {
			http.Error(w, "since: "+err.Error(), http.StatusBadRequest)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), time.Minute)
		defer cancel()
		tr, err := c.Explain(ctx, user, since, at, nil)
		if err != nil {
			http.Error(w, "explain: "+err.Error(), http.StatusBadGateway)
			return
		}
		if task := q.Get("task"); task != "" {
			tr = tr.Filter(task)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(tr) // the client went away: nothing to do
	}
}
