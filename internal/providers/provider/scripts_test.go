package provider

import (
	"errors"
	"testing"
)

func TestScriptsCheck(t *testing.T) {
	names := Scripts{}
	open := Scripts{Inline: true, URLHosts: []string{"ivr.example", "scripts.example:8443"}}
	cases := []struct {
		rules  Scripts
		script string
		want   ScriptKind
		ok     bool
	}{
		{names, "welcome", ScriptName, true},
		{names, "", ScriptName, true},
		{names, "<Response/>", 0, false},
		{names, " <Response/>", 0, false},
		{names, "https://ivr.example/a.xml", 0, false},
		{open, "<Response><Say>Hi</Say></Response>", ScriptInline, true},
		{open, `<Response><Gather action="https://ivr.example/pin"/></Response>`, ScriptInline, true},
		{open, `<Response><Gather action="https://evil.example/pin"/></Response>`, 0, false},
		{open, `<Response><Play>http://ivr.example/a.mp3</Play></Response>`, 0, false},
		{open, "https://ivr.example/a.xml", ScriptURL, true},
		{open, "https://IVR.example/a.xml", ScriptURL, true},
		{open, "https://scripts.example:8443/a.xml", ScriptURL, true},
		{open, "https://scripts.example/a.xml", 0, false},
		{open, "http://ivr.example/a.xml", 0, false},
		{open, "https://user@ivr.example/a.xml", 0, false},
		{open, "ftp://ivr.example/a.xml", 0, false},
	}
	for _, c := range cases {
		kind, err := c.rules.Check(c.script)
		if c.ok && (err != nil || kind != c.want) {
			t.Errorf("%+v %q: %v %v, want %v", c.rules, c.script, kind, err, c.want)
		}
		if !c.ok && !errors.Is(err, ErrScript) {
			t.Errorf("%+v %q: %v %v, want ErrScript", c.rules, c.script, kind, err)
		}
	}
}
