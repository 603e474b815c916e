package app

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/admin"
)

// /admin/user/ shows a stored value that does not decode as such, with
// why, rather than as no value; a table whose partition this process does
// not own shows nothing.
func TestAdminUserShowsAnUnreadableValue(t *testing.T) {
	get := map[string]func(string) (any, error){
		"scheduler": func(string) (any, error) {
			return &codec.Undecodable{Data: []byte{0x0f, 0xff}, Err: errors.New("cannot parse invalid wire-format data")}, nil
		},
		"dialer": func(id string) (any, error) {
			if id == "elsewhere" {
				return nil, errors.New("this processor does not contain partition 3")
			}
			return &pb.DialerState{Calls: []*pb.DialRecord{{CallId: "c1"}}}, nil
		},
	}
	settle := func(st *pb.UserState) *pb.UserState { return st }
	srv := httptest.NewServer(userHandler(get, 8, settle, false))
	defer srv.Close()
	ask := func(id string) admin.User {
		t.Helper()
		resp, err := http.Get(srv.URL + "/admin/user/" + id)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var u admin.User
		if err := json.NewDecoder(resp.Body).Decode(&u); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %v", resp.Status, err)
		}
		return u
	}
	u := ask("u1")
	if u.Scheduler != nil || !strings.Contains(u.SchedulerUnreadable, "(2 bytes) does not decode: cannot parse") {
		t.Fatalf("scheduler %s, unreadable %q", u.Scheduler, u.SchedulerUnreadable)
	}
	if !strings.Contains(string(u.Dialer), `"call_id":"c1"`) || u.DialerUnreadable != "" {
		t.Fatalf("dialer %s, unreadable %q", u.Dialer, u.DialerUnreadable)
	}
	if u := ask("elsewhere"); u.Dialer != nil || u.DialerUnreadable != "" {
		t.Fatalf("a partition not owned: dialer %s, unreadable %q", u.Dialer, u.DialerUnreadable)
	}
}
