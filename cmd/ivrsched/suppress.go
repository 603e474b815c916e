package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/phone"
	"github.com/ivrsched/ivrsched/internal/redact"
	"github.com/ivrsched/ivrsched/internal/suppress"
)

const suppressUsage = "usage: ivrsched suppress add|remove|check --number E164 [--reason R] [--until T] | ivrsched suppress list  (see --help of each)"

// suppressionKeyFlag registers --suppression-key-file.
func suppressionKeyFlag(fs *flag.FlagSet) *string {
	return fs.String("suppression-key-file", "", "a file holding the deployment's suppression key (32 bytes or more, the same in every instance), the secret of the keyed hash under which numbers are on the do-not-call list (default: $"+suppress.EnvKey+")")
}

// suppressionKey loads the key from file or the environment: a flag error
// when there is none or it is too short.
func suppressionKey(file string, getenv func(string) string) (suppress.Key, error) {
	k, err := suppress.LoadKey(file, getenv)
	if err != nil {
		return nil, badFlag("suppression-key-file", "%v", err)
	}
	return k, nil
}

// embeddedKeyFile is the suppression key of `ivrsched run` on its
// embedded broker given none, in its --data-dir.
const embeddedKeyFile = "suppression.key"

// embeddedSuppressionKey reads the key at path, or makes a random one there
// (mode 0600) when there is none: the embedded broker's list lives in the
// same data directory, so it keeps its key across restarts, and a number on
// it stays on it.
func embeddedSuppressionKey(path string) (suppress.Key, error) {
	k, err := suppress.LoadKey(path, func(string) string { return "" })
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		return k, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("suppression key: %w", err)
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand since Go 1.24)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("suppression key: %w", err)
	}
	if _, err := f.WriteString(hex.EncodeToString(b) + "\n"); err != nil {
		f.Close()
		return nil, fmt.Errorf("suppression key %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("suppression key %s: %w", path, err)
	}
	return suppress.LoadKey(path, func(string) string { return "" })
}

// cmdSuppress edits and reads the do-not-call list (ivr-suppressions).
func cmdSuppress(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usageError{"want a subcommand; " + suppressUsage}
	}
	switch args[0] {
	case "add", "remove", "check", "list":
		return suppressRun(ctx, args[0], args[1:], stdout)
	case "-h", "--help", "help":
		fmt.Fprintln(stdout, suppressUsage)
		return nil
	}
	return usageError{fmt.Sprintf("unknown subcommand %q; %s", args[0], suppressUsage)}
}

var suppressSummaries = map[string]string{
	"add": "Puts a number on the do-not-call list (the ivr-suppressions topic): no scheduler\n" +
		"calls it from now on, whichever user it belongs to, until --until if given. A Forget\n" +
		"of its user does not lift it. Pending follow-ups are reported KIND_SUPPRESSED when due.",
	"remove": "Takes a number off the do-not-call list (a tombstone): its next follow-ups are called.",
	"check":  "Says whether a number is on the do-not-call list, and the entry's reason and times.",
	"list": "Lists the entries of the do-not-call list by a prefix of their keyed hash, with reason,\n" +
		"times and source. Numbers are not stored, so none is shown.",
}

func suppressRun(ctx context.Context, sub string, args []string, stdout io.Writer) error {
	fs := newFlagSet("suppress "+sub, suppressSummaries[sub])
	var k kafkaFlags
	k.register(fs, defaultBrokers)
	keyFile := suppressionKeyFlag(fs)
	var number, reason, until *string
	if sub != "list" {
		number = fs.String("number", "", "the number, in E.164 form like +4915112345678 (required)")
	}
	if sub == "add" {
		reason = fs.String("reason", "", fmt.Sprintf("why, up to %d bytes (shown in reports and by list)", suppress.MaxReasonBytes))
		until = fs.String("until", "", "when the entry ends: an RFC 3339 time like 2027-06-01T00:00:00Z, or a duration from now like 720h; empty: never")
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	key, err := suppressionKey(*keyFile, os.Getenv)
	if err != nil {
		return err
	}
	var e164 string
	if number != nil {
		if *number == "" {
			return badFlag("number", "required; want a number in E.164 form like +4915112345678")
		}
		n, err := phone.Parse(*number)
		if err != nil {
			return badFlag("number", "%v; want a valid number in E.164 form like +4915112345678", err)
		}
		e164 = n.E164
	}
	now := time.Now()
	entry := &pb.Suppression{AddedAt: timestamppb.New(now), Source: pb.Suppression_SOURCE_CLI}
	if reason != nil {
		switch {
		case len(*reason) > suppress.MaxReasonBytes:
			return badFlag("reason", "%d bytes; want at most %d", len(*reason), suppress.MaxReasonBytes)
		case !utf8.ValidString(*reason):
			return badFlag("reason", "not valid UTF-8")
		}
		entry.Reason = *reason
	}
	if until != nil && *until != "" {
		t, err := parseUntil(*until, now)
		if err != nil {
			return err
		}
		entry.Until = timestamppb.New(t)
	}
	kc, err := k.kafka("ivrsched-suppress")
	if err != nil {
		return err
	}
	topics := k.topics()
	switch sub {
	case "add":
		if err := suppress.Write(ctx, kc, topics, key.Hash(e164), entry); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s suppressed as %s%s\n", redact.Phone(e164), shortHash(key.Hash(e164)), describeEntry(entry, now))
	case "remove":
		if err := suppress.Write(ctx, kc, topics, key.Hash(e164), nil); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s removed from the do-not-call list (%s)\n", redact.Phone(e164), shortHash(key.Hash(e164)))
	case "check":
		hash := key.Hash(e164)
		en, err := suppress.Lookup(ctx, kc, topics, hash)
		if err != nil {
			return err
		}
		if en == nil {
			fmt.Fprintf(stdout, "%s not suppressed\n", redact.Phone(e164))
			return nil
		}
		state := "suppressed"
		if en.Value != nil && !suppress.Active(en.Value, now) {
			state = "not suppressed (the entry has ended)"
		}
		fmt.Fprintf(stdout, "%s %s: %s%s\n", redact.Phone(e164), state, shortHash(hash), describeEntry(en.Value, now))
	case "list":
		entries, err := suppress.ReadAll(ctx, kc, topics)
		if err != nil {
			return err
		}
		sort.Slice(entries, func(i, j int) bool { return entries[i].Hash < entries[j].Hash })
		for _, en := range entries {
			fmt.Fprintf(stdout, "%s%s\n", shortHash(en.Hash), describeEntry(en.Value, now))
		}
		fmt.Fprintf(stdout, "# %d entries\n", len(entries))
	}
	return nil
}

// parseUntil reads --until: an RFC 3339 time or a positive duration from
// now; either must lie in the future.
func parseUntil(v string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(v); err == nil {
		if d <= 0 {
			return time.Time{}, badFlag("until", "%v; want a positive duration like 720h, or an RFC 3339 time", d)
		}
		return now.Add(d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, badFlag("until", "%q is neither an RFC 3339 time like 2027-06-01T00:00:00Z nor a duration like 720h", v)
	}
	if !t.After(now) {
		return time.Time{}, badFlag("until", "%s is not in the future", v)
	}
	return t, nil
}

// shortHash is the first 16 hex digits of a key: enough to tell entries
// apart, and no number.
func shortHash(h string) string {
	if len(h) > 16 {
		return h[:16]
	}
	return h
}

// describeEntry writes an entry's fields after its hash.
func describeEntry(e *pb.Suppression, now time.Time) string {
	if e == nil {
		return "  (the value does not decode; it suppresses)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  reason=%q", suppress.Reason(e))
	if e.GetAddedAt() != nil {
		fmt.Fprintf(&b, " added=%s", e.GetAddedAt().AsTime().UTC().Format(time.RFC3339))
	}
	if e.GetUntil() != nil {
		fmt.Fprintf(&b, " until=%s", e.GetUntil().AsTime().UTC().Format(time.RFC3339))
		if !suppress.Active(e, now) {
			b.WriteString(" (ended)")
		}
	}
	fmt.Fprintf(&b, " source=%s", strings.ToLower(strings.TrimPrefix(e.GetSource().String(), "SOURCE_")))
	return b.String()
}
