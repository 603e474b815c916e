package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"
)

// Key is the record key under which the policy is stored in the compacted
// topic `ivr-policies`: one policy per deployment, so one key, and
// compaction keeps the latest.
const Key = "policy"

// Encode is the policy's canonical encoding, the value stored in
// `ivr-policies`: the normalized document as JSON, with every field of the
// default written out, campaigns sorted by id, days in week order (Monday
// first), regions and countries sorted, times "HH:MM", durations in their shortest form
// (10m, 1h30m, 1d). It is itself a valid policy document: Decode (or Parse)
// of it gives a policy with the same Version.
func (p *Policy) Encode() []byte {
	b, err := p.encode()
	if err != nil {
		panic(err) // the document types always encode
	}
	return b
}

// Decode reads a policy from its encoding (Encode) or from any document
// Parse reads.
func Decode(b []byte) (*Policy, error) { return Parse(b) }

func versionOf(enc []byte) string {
	sum := sha256.Sum256(enc)
	return hex.EncodeToString(sum[:8])
}

type docJSON struct {
	Default   rulesJSON            `json:"default"`
	Campaigns map[string]rulesJSON `json:"campaigns,omitempty"`
	Countries []string             `json:"countries,omitempty"`
}

type rulesJSON struct {
	OpenHours []openHoursJSON `json:"open_hours,omitempty"`
	Blackouts *[]blackoutJSON `json:"blackouts,omitempty"`
	Cap       any             `json:"cap,omitempty"` // "none" or capJSON
	Spread    string          `json:"spread,omitempty"`
	Retry     any             `json:"retry,omitempty"` // "none" or a map
	// RFC 3339 in UTC.
	PausedUntil string `json:"paused_until,omitempty"`
	// Written only when true: a policy without it keeps its version.
	SuppressionExempt bool `json:"suppression_exempt,omitempty"`
}

type openHoursJSON struct {
	Days []string `json:"days"`
	From string   `json:"from"`
	To   string   `json:"to"`
}

type blackoutJSON struct {
	Name    string   `json:"name"`
	From    string   `json:"from"`
	To      string   `json:"to"`
	Regions []string `json:"regions,omitempty"`
}

type capJSON struct {
	Calls int    `json:"calls"`
	Per   string `json:"per"`
}

func (p *Policy) encode() ([]byte, error) {
	doc := docJSON{Default: rulesToJSON(p.Default), Countries: p.Countries}
	if !p.Default.Retry.Enabled() {
		// A policy without retries keeps the version it had before retry
		// rules existed.
		doc.Default.Retry = nil
	}
	if len(p.Campaigns) > 0 {
		doc.Campaigns = make(map[string]rulesJSON, len(p.Campaigns))
		for name, r := range p.Campaigns {
			doc.Campaigns[name] = rulesToJSON(r)
		}
	}
	return json.Marshal(doc) // map keys sorted: deterministic
}

func rulesToJSON(r Rules) rulesJSON {
	var out rulesJSON
	for _, o := range r.OpenHours {
		days := make([]string, len(o.Days))
		for i, d := range o.Days {
			days[i] = strings.ToLower(d.String()[:3])
		}
		out.OpenHours = append(out.OpenHours, openHoursJSON{Days: days, From: o.From.String(), To: o.To.String()})
	}
	if r.Blackouts != nil {
		bs := make([]blackoutJSON, len(r.Blackouts))
		for i, b := range r.Blackouts {
			bs[i] = blackoutJSON{Name: b.Name, From: b.From.String(), To: b.To.String(), Regions: b.Regions}
		}
		out.Blackouts = &bs
	}
	if r.Cap != nil {
		if r.Cap.Calls == 0 {
			out.Cap = "none"
		} else {
			out.Cap = capJSON{Calls: r.Cap.Calls, Per: formatDuration(r.Cap.Per)}
		}
	}
	if r.Spread != nil {
		out.Spread = formatDuration(*r.Spread)
	}
	if r.Retry != nil {
		out.Retry = retryToJSON(r.Retry)
	}
	if r.PausedUntil != nil {
		out.PausedUntil = r.PausedUntil.UTC().Format(time.RFC3339Nano)
	}
	out.SuppressionExempt = r.SuppressionExempt
	return out
}

// retryToJSON writes retry rules: "none", or a map (json sorts its keys).
func retryToJSON(r *Retry) any {
	if !r.Enabled() {
		return "none"
	}
	m := map[string]any{"max_attempts": r.MaxAttempts, "max_age": formatDuration(r.MaxAge)}
	for o, b := range r.Outcomes {
		m[o] = map[string]any{"delay": formatDuration(b.Delay), "max_delay": formatDuration(b.MaxDelay), "jitter": b.Jitter}
	}
	return m
}
