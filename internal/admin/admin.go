// Package admin is ivrsched's admin API: what each instance answers on its
// web server about the partitions it owns (/admin/upcoming, /admin/user/),
// and how the CLI finds the instances without a hand-kept list: every
// member of the scheduler's and the dialer's consumer groups carries its
// admin address in its member metadata (Announcement), so describing the
// groups gives each instance's address and the partitions it owns.
package admin

import (
	"encoding/json"
	"time"
)

// Announcement is the user data of a consumer group member of ivrsched:
// where its admin API answers.
type Announcement struct {
	// URL is the instance's web server, like http://10.0.0.7:9095.
	URL string `json:"admin"`
}

// Encode returns the announcement as member user data.
func (a Announcement) Encode() []byte {
	b, _ := json.Marshal(a)
	return b
}

// Upcoming is one pending follow-up in the answer of /admin/upcoming.
type Upcoming struct {
	UserID      string    `json:"user_id"`
	TaskID      string    `json:"task_id"`
	DueAt       time.Time `json:"due_at"`
	RequestedAt time.Time `json:"requested_at,omitempty"`
	Deferred    string    `json:"deferred,omitempty"`
	Campaign    string    `json:"campaign,omitempty"`
	Partition   int32     `json:"partition"`
}

// UpcomingPage is the answer of /admin/upcoming: the next follow-ups of
// the partitions the instance owns, in firing order.
type UpcomingPage struct {
	Partitions []int32    `json:"partitions"`
	Upcoming   []Upcoming `json:"upcoming"`
}

// PhonesParam=PhonesFull asks /admin/user/<id> for the phone numbers in
// full, which it gives only to a request with the admin token; without
// it they are masked.
const (
	PhonesParam = "phones"
	PhonesFull  = "full"
)

// User is the answer of /admin/user/<id>: the user's values in the tables
// of the roles this instance runs, where it owns the user's partition
// (protojson; absent when not owned or not there).
type User struct {
	UserID    string          `json:"user_id"`
	Partition int32           `json:"partition"`
	Scheduler json.RawMessage `json:"scheduler,omitempty"`
	Dialer    json.RawMessage `json:"dialer,omitempty"`
	// SchedulerUnreadable and DialerUnreadable say why the user's stored
	// value in that table does not decode, instead of the value: it is
	// kept as it is (the user's calls and commands go to the dead-letter
	// topics as unreadable_state) until a Forget erases it.
	SchedulerUnreadable string `json:"scheduler_unreadable,omitempty"`
	DialerUnreadable    string `json:"dialer_unreadable,omitempty"`
}
