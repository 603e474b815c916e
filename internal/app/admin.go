package app

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/mux"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/admin"
	"github.com/ivrsched/ivrsched/internal/redact"
	"github.com/ivrsched/ivrsched/processors/scheduler/dueindex"
	"github.com/ivrsched/ivrsched/topology"
)

// announceURL is the admin address this process announces in its consumer
// group members' metadata: cfg.AdminURL, else its admin listener's address
// (an unspecified host replaced by the host name).
func announceURL(cfg Config) string {
	if cfg.AdminURL != "" {
		return cfg.AdminURL
	}
	host, port, err := net.SplitHostPort(cfg.AdminHTTP)
	if err != nil {
		return "http://" + cfg.AdminHTTP
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if h, err := os.Hostname(); err == nil {
			host = h
		}
	}
	return "http://" + net.JoinHostPort(host, port)
}

// mountAdmin serves the admin API of this process's roles: /admin/upcoming
// and /admin/user/<id>, about the partitions it owns. Without an admin
// token, the users' phone numbers are masked.
func mountAdmin(r *mux.Router, cfg Config, run *Running, roles []*role) {
	get := map[string]func(string) (any, error){}
	for _, ro := range roles {
		get[ro.name] = ro.get
	}
	parts := int32(cfg.Kafka.Partitions)
	if run.Scheduler != nil {
		r.HandleFunc("/admin/upcoming", func(w http.ResponseWriter, req *http.Request) {
			q := req.URL.Query()
			from, to, limit, campaign := time.Time{}, time.Time{}, 20, q.Get("campaign")
			var err error
			if v := q.Get("from"); v != "" {
				if from, err = time.Parse(time.RFC3339Nano, v); err != nil {
					http.Error(w, "from: want an RFC 3339 time", http.StatusBadRequest)
					return
				}
			}
			if v := q.Get("to"); v != "" {
				if to, err = time.Parse(time.RFC3339Nano, v); err != nil {
					http.Error(w, "to: want an RFC 3339 time", http.StatusBadRequest)
					return
				}
			}
			if v := q.Get("limit"); v != "" {
				if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > 10000 {
					http.Error(w, "limit: want 1 to 10000", http.StatusBadRequest)
					return
				}
			}
			page := admin.UpcomingPage{Partitions: []int32{}, Upcoming: []admin.Upcoming{}}
			for p := int32(0); p < parts; p++ {
				x := run.Scheduler.Punctuator().Index(p)
				if x == nil {
					continue
				}
				page.Partitions = append(page.Partitions, p)
				up, err := upcoming(x, p, get["scheduler"], from, to, campaign, limit)
				if err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				page.Upcoming = append(page.Upcoming, up...)
			}
			slices.SortFunc(page.Upcoming, func(a, b admin.Upcoming) int {
				return dueindex.Compare(dueindex.Pos{Due: a.DueAt.UnixNano(), User: a.UserID, Task: a.TaskID},
					dueindex.Pos{Due: b.DueAt.UnixNano(), User: b.UserID, Task: b.TaskID})
			})
			if len(page.Upcoming) > limit {
				page.Upcoming = page.Upcoming[:limit]
			}
			writeJSON(w, http.StatusOK, page)
		})
	}
	settle := func(st *pb.UserState) *pb.UserState { return st }
	if run.Scheduler != nil {
		settle = run.Scheduler.Settled
	}
	r.PathPrefix("/admin/user/").HandlerFunc(userHandler(get, parts, settle, cfg.AdminToken != ""))
	r.Handle("/api/explain", admin.ExplainHandler(adminClient(cfg), cfg.now))
}

// userHandler answers /admin/user/<id> from the tables of the roles in get
// (a table's Get: an error where this process does not own the user's
// partition), the scheduler's value settled by settle, the phone numbers of
// every value masked unless the request asks for them (?phones=full, as
// `show --show-phone` does) and carries the admin token (tokened: the
// listener requires it of every request; else no request carries it).
func userHandler(get map[string]func(string) (any, error), parts int32, settle func(*pb.UserState) *pb.UserState, tokened bool) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		mask := !tokened || req.URL.Query().Get(admin.PhonesParam) != admin.PhonesFull
		id := strings.TrimPrefix(req.URL.Path, "/admin/user/")
		if id == "" {
			http.Error(w, "want /admin/user/<user id>", http.StatusBadRequest)
			return
		}
		u := admin.User{UserID: id, Partition: topology.Partition(id, parts)}
		for _, ro := range []string{"scheduler", "dialer"} {
			g := get[ro]
			if g == nil {
				continue
			}
			v, err := g(id)
			if errors.Is(err, errNotReady) {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			if err != nil {
				continue // not owned here
			}
			raw, unreadable := userValue(v, settle, mask)
			if ro == "scheduler" {
				u.Scheduler, u.SchedulerUnreadable = raw, unreadable
			} else {
				u.Dialer, u.DialerUnreadable = raw, unreadable
			}
		}
		writeJSON(w, http.StatusOK, u)
	}
}

// userValue is a table value as protojson (its phone numbers masked if
// mask), or why it does not decode.
func userValue(v any, settle func(*pb.UserState) *pb.UserState, mask bool) (json.RawMessage, string) {
	switch m := v.(type) {
	case *codec.Undecodable:
		return nil, fmt.Sprintf("stored value (%d bytes) does not decode: %v", len(m.GetData()), m.Err)
	case *pb.UserState:
		v = settle(m)
	}
	m, ok := v.(proto.Message)
	if !ok {
		return nil, ""
	}
	if mask {
		m = redact.Phones(m)
	}
	raw, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Sprintf("stored value does not encode as JSON: %v", err)
	}
	return raw, ""
}

// upcoming pages through one partition's due index from from, reading each
// follow-up's user value for its requested time and campaign, until it has
// limit follow-ups of campaign (any if empty) due by to (zero: any time),
// or has looked at 100 times limit. An error is the index's (its store could
// not be read): the partition's list would not be complete.
func upcoming(x *dueindex.Index, part int32, get func(string) (any, error), from, to time.Time, campaign string, limit int) ([]admin.Upcoming, error) {
	var out []admin.Upcoming
	after := dueindex.Pos{}
	if !from.IsZero() {
		after.Due = from.UnixNano()
	}
	for looked := 0; len(out) < limit && looked < 100*limit; {
		batch, err := x.Upcoming(after, limit)
		if err != nil {
			return nil, fmt.Errorf("partition %d: %w", part, err)
		}
		if len(batch) == 0 {
			break
		}
		for _, p := range batch {
			looked++
			after = p
			if !to.IsZero() && p.Time().After(to) {
				return out, nil
			}
			u := admin.Upcoming{UserID: p.User, TaskID: p.Task, DueAt: p.Time().UTC(), Partition: part}
			if get != nil {
				if v, err := get(p.User); err == nil {
					if st, ok := v.(*pb.UserState); ok {
						for _, t := range st.GetPending() {
							if t.GetTaskId() == p.Task {
								u.Campaign, u.Deferred = t.GetAction().GetCampaignId(), t.GetDeferred()
								if t.GetRequestedAt() != nil {
									u.RequestedAt = t.GetRequestedAt().AsTime().UTC()
								}
							}
						}
					}
				}
			}
			if campaign != "" && u.Campaign != campaign {
				continue
			}
			out = append(out, u)
			if len(out) == limit {
				break
			}
		}
	}
	return out, nil
}
