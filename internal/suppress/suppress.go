// Package suppress is the do-not-call list: entries of the compacted topic
// ivr-suppressions, each keyed by a keyed hash of a number in E.164 form
// (HMAC-SHA256 under the deployment's secret), so that neither key nor
// value holds the number and an entry outlives the erasure of every user
// who had it.
//
// The scheduler checks a follow-up's number when it falls due, the dialer
// again just before it places the call (List.Check); `ivrsched suppress`
// writes and reads the topic. The list is by number, not by user: a Forget
// and a new onboarding of the same number do not lift it.
package suppress

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/clock"
	"github.com/ivrsched/ivrsched/internal/phone"
	"github.com/ivrsched/ivrsched/internal/policy"
)

const (
	// EnvKey is the environment variable that may hold the key.
	EnvKey = "IVRSCHED_SUPPRESSION_KEY"
	// MinKeyBytes is the shortest key accepted (after trimming spaces).
	MinKeyBytes = 32
	// MaxReasonBytes bounds an entry's reason.
	MaxReasonBytes = 256
)

// ErrNoKey: no key was given; a role that reads the list refuses to start.
var ErrNoKey = errors.New("no suppression key: set --suppression-key-file or " + EnvKey +
	" (at least 32 bytes of secret, the same in every instance and for `ivrsched suppress`)")

// Key is the deployment's secret for the keyed hash of numbers.
type Key []byte

// LoadKey reads the key from file if set, else from the environment
// variable EnvKey (getenv: os.Getenv if nil). Surrounding white space is
// trimmed. No key is ErrNoKey; one shorter than MinKeyBytes an error.
func LoadKey(file string, getenv func(string) string) (Key, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	var raw, from string
	switch {
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("suppression key: %w", err)
		}
		raw, from = string(b), "--suppression-key-file"
	case getenv(EnvKey) != "":
		raw, from = getenv(EnvKey), EnvKey
	default:
		return nil, ErrNoKey
	}
	raw = strings.TrimSpace(raw)
	if len(raw) < MinKeyBytes {
		return nil, fmt.Errorf("suppression key from %s is %d bytes long; at least %d are required", from, len(raw), MinKeyBytes)
	}
	return Key(raw), nil
}

// Hash is the record key of a number: the lowercase hex HMAC-SHA256 of its
// E.164 form under k. A number the numbering plan knows is hashed in its
// E.164 form; any other string as it is.
func (k Key) Hash(number string) string {
	return hex.EncodeToString(k.Sum(number))
}

// Sum is Hash's bytes before hex: what a dialer's record of a call keeps
// (DialRecord.number_key), half the size.
func (k Key) Sum(number string) []byte { return (&Hasher{Key: k}).Sum(number) }

// Hasher is Key's Hash and Sum for many numbers: it reuses its HMACs, for a
// new one computes the key's inner and outer pads again, half of a number's
// hashing. Safe for concurrent use; not to be copied once used.
type Hasher struct {
	Key  Key
	macs sync.Pool // of HMACs under Key, reset
}

// Hash is Key.Hash.
func (h *Hasher) Hash(number string) string { return hex.EncodeToString(h.Sum(number)) }

// Sum is Key.Sum.
func (h *Hasher) Sum(number string) []byte {
	if n, err := phone.Parse(number); err == nil {
		number = n.E164
	}
	m, _ := h.macs.Get().(hash.Hash)
	if m == nil {
		m = hmac.New(sha256.New, h.Key)
	}
	m.Write([]byte(number))
	b := m.Sum(nil)
	m.Reset()
	h.macs.Put(m)
	return b
}

// OptOutReason is the reason of an entry a recipient's opt-out added.
const OptOutReason = "opted out by keypress"

// OptOut is the entry the dialer writes when the recipient of call callID
// opted out at at: no end, reason OptOutReason and the call id (cut so the
// reason stays within MaxReasonBytes).
func OptOut(callID string, at time.Time) *pb.Suppression {
	r := OptOutReason + " (call " + callID + ")"
	if len(r) > MaxReasonBytes {
		r = Reason(&pb.Suppression{Reason: r})
	}
	return &pb.Suppression{Reason: r, AddedAt: timestamppb.New(at), Source: pb.Suppression_SOURCE_OPT_OUT}
}

// Active reports whether e suppresses at now: it has no end, or ends after now.
func Active(e *pb.Suppression, now time.Time) bool {
	return e != nil && (e.GetUntil() == nil || now.Before(e.GetUntil().AsTime()))
}

// Checker answers whether a call to a number may be placed. *List is one;
// nil means no list.
type Checker interface {
	// Check returns the entry that suppresses a call of campaign to
	// number now, or nil. An error (the list could not be read) must not be
	// taken as "not suppressed".
	Check(number, campaign string) (*pb.Suppression, error)
}

// List checks numbers against the do-not-call list.
type List struct {
	// Get reads the value stored under a record key (a Goka view's Get;
	// nil bytes: none).
	Get func(key string) ([]byte, error)
	// Hasher hashes the numbers into record keys under the deployment's key.
	Hasher
	// Clock: an entry whose until is not after its Now does not suppress.
	Clock clock.Clock
	// Policy, if set, returns the calling policy in force: a campaign it
	// exempts (suppression_exempt) is not checked.
	Policy func() *policy.Policy
}

// Check implements Checker. An entry that does not decode suppresses (its
// reason says so): the list errs towards not calling.
func (l *List) Check(number, campaign string) (*pb.Suppression, error) {
	if l == nil || l.Get == nil {
		return nil, nil
	}
	if l.Policy != nil && l.Policy().SuppressionExempt(campaign) {
		return nil, nil
	}
	raw, err := l.Get(l.Hash(number))
	if err != nil {
		return nil, fmt.Errorf("read the suppression list: %w", err)
	}
	if raw == nil {
		return nil, nil
	}
	e := &pb.Suppression{}
	if err := proto.Unmarshal(raw, e); err != nil {
		return &pb.Suppression{Reason: "entry does not decode"}, nil
	}
	var clk clock.Clock = clock.Real{}
	if l.Clock != nil {
		clk = l.Clock
	}
	if !Active(e, clk.Now()) {
		return nil, nil
	}
	return e, nil
}

// DetailPrefix starts the detail of a call the dialer did not place because
// its number is on the do-not-call list (CallStatus, CallResult and
// CallEnded detail, outcome suppressed); the entry's reason follows.
const DetailPrefix = "suppressed: "

// Detail is the detail of a call not placed because of entry e:
// DetailPrefix and e's reason (Reason).
func Detail(e *pb.Suppression) string { return DetailPrefix + Reason(e) }

// DetailReason returns the entry's reason a Detail holds, cut like Reason;
// ok is false for a detail that does not start with DetailPrefix.
func DetailReason(detail string) (reason string, ok bool) {
	reason, ok = strings.CutPrefix(detail, DetailPrefix)
	return Reason(&pb.Suppression{Reason: reason}), ok
}

// Reason returns e's reason cut to MaxReasonBytes (a producer may write a
// longer one), at a rune boundary.
func Reason(e *pb.Suppression) string {
	r := e.GetReason()
	if len(r) <= MaxReasonBytes {
		return r
	}
	r = r[:MaxReasonBytes]
	for len(r) > 0 && !validEnd(r) {
		r = r[:len(r)-1]
	}
	return r
}

func validEnd(s string) bool {
	return strings.ToValidUTF8(s, "\uFFFD") == s
}
