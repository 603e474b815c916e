package main

import (
	"bytes"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/deadletter"
	"github.com/ivrsched/ivrsched/internal/kafkatest"
	"github.com/ivrsched/ivrsched/internal/providers/twilio/twiliotest"
	"github.com/ivrsched/ivrsched/topology"
)

// The held-out probe of issue 34's "What it must show": one `ivrsched
// run` on its embedded broker, with the default flags plus an admin token,
// the Twilio provider against a fake of its API, and the admin listener's
// announced addresses allowed on 127.0.0.1 only; probed as an attacker
// would, it gives nothing away:
//
//   - a rogue member of the scheduler's group announcing an address
//     outside the allowed networks is not fetched, and nothing it answers
//     is shown;
//   - two onboarding commands for one user with 16,000 follow-ups each go
//     to scheduler-dlq (too_many_follow_ups under the default caps, or
//     state_too_large), /readyz stays 200, and another user's follow-up
//     still fires;
//   - an onboarding command to a premium-rate number (+1 900) is
//     dead-lettered, never dialled;
//   - a command whose script is inline TwiML that dials that number never
//     reaches the provider as TwiML;
//   - a client without the token gets no full phone number from any
//     listener, and a 1 MiB multipart upload to /ui/run-now is refused
//     before a byte of it is read (with the token too).
func TestHeldOutSecurityProbe(t *testing.T) {
	const (
		token   = "s3cret-admin-token-16+"
		sid     = "AC00000000000000000000000000000034"
		premium = "+19005550199"
		// The users' numbers; none may show without the token.
		otherPhone, twimlPhone = "+14155550142", "+14155550143"
	)
	t.Setenv(adminTokenEnv, token)
	t.Setenv("TWILIO_ACCOUNT_SID", sid)
	t.Setenv("TWILIO_AUTH_TOKEN", "twilio-auth-token")
	fake := twiliotest.New(twiliotest.Options{AccountSID: sid, AuthToken: "twilio-auth-token"})
	t.Cleanup(fake.Close)
	callbacks := freeAddr(t)
	r := startRun(t, "--admin-networks", "127.0.0.1/32",
		"--provider", "twilio", "--twilio-api", fake.URL, "--twilio-from", "+14155550100", "--cps", "50",
		"--twilio-script-url", "https://ivr.example/twiml/{script}",
		"--callback-http", callbacks, "--public-url", "http://"+callbacks)
	r.token = token
	r.awaitReady()
	topics := topology.NewTopics("")

	t.Run("rogue group member outside the allowed networks", func(t *testing.T) {
		var hits atomic.Int32
		rogue := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			hits.Add(1)
			http.Error(w, "SECRET-IAM-CREDENTIALS", http.StatusForbidden)
		}))
		ln, err := net.Listen("tcp", "127.0.0.2:0") // loopback, but outside 127.0.0.1/32
		if err != nil {
			t.Fatal(err)
		}
		rogue.Listener = ln
		rogue.Start()
		defer rogue.Close()
		rogueMember(t, r.ctx, r.broker, rogue.URL) // leaves when this subtest ends
		_, page := r.get("/ui/", true)
		_, stderr := r.cliCode("upcoming", "--admin-networks", "127.0.0.1/32")
		if n := hits.Load(); n != 0 || strings.Contains(page, "SECRET") || strings.Contains(stderr, "SECRET") {
			t.Errorf("the rogue URL was fetched %d times; page:\n%s\nupcoming: %s", n, page, stderr)
		}
	})
	r.awaitReady() // the scheduler has its partitions back

	em, err := goka.NewEmitter([]string{r.broker}, topics.Onboarding, new(codec.Command), goka.WithEmitterHasher(topology.Murmur2()))
	if err != nil {
		t.Fatal(err)
	}
	emit := func(user string, o *pb.Onboard) {
		t.Helper()
		if err := em.EmitSync(user, &pb.Command{UserId: user, RequestedAt: timestamppb.Now(), Command: &pb.Command_Onboard{Onboard: o}}); err != nil {
			t.Fatal(err)
		}
	}
	soon := func(task, script string) *pb.FollowUp {
		return &pb.FollowUp{TaskId: task, When: &pb.FollowUp_Delay{Delay: durationpb.New(0)}, Action: &pb.Action{IvrScript: script}}
	}

	t.Run("oversized commands, premium number, inline TwiML", func(t *testing.T) {
		huge := make([]*pb.FollowUp, 16000)
		for i := range huge {
			huge[i] = &pb.FollowUp{TaskId: "f" + strconv.Itoa(i), When: &pb.FollowUp_Delay{Delay: durationpb.New(time.Hour)}}
		}
		emit("big", &pb.Onboard{Phone: "+14155550144", FollowUps: huge})
		emit("big", &pb.Onboard{Phone: "+14155550144", FollowUps: huge})
		emit("premium", &pb.Onboard{Phone: premium, FollowUps: []*pb.FollowUp{soon("p1", "welcome")}})
		emit("twiml", &pb.Onboard{Phone: twimlPhone, FollowUps: []*pb.FollowUp{soon("t1", "<Response><Dial>"+premium+"</Dial></Response>")}})
		emit("other", &pb.Onboard{Phone: otherPhone, FollowUps: []*pb.FollowUp{soon("o1", "welcome")}})

		// Dead letters: both oversized commands and the premium number.
		var bigReasons []string
		premiumReason := ""
		kafkatest.Consume(t, r.broker, string(topics.SchedulerDLQ), nil, 30*time.Second, func(m *sarama.ConsumerMessage) bool {
			var dl pb.DeadLetter
			if proto.Unmarshal(m.Value, &dl) != nil {
				return false
			}
			switch string(m.Key) {
			case "big":
				bigReasons = append(bigReasons, dl.GetReason())
			case "premium":
				premiumReason = dl.GetReason()
			}
			return len(bigReasons) == 2 && premiumReason != ""
		})
		if second := bigReasons[1]; second != string(deadletter.ReasonStateTooLarge) && second != string(deadletter.ReasonTooManyFollowUps) {
			t.Errorf("the second oversized command is dead-lettered as %q; want %s or %s", second, deadletter.ReasonStateTooLarge, deadletter.ReasonTooManyFollowUps)
		}
		t.Logf("oversized commands dead-lettered as %v; the premium number as %s", bigReasons, premiumReason)
		if code, body := r.get("/readyz", false); code != http.StatusOK {
			t.Errorf("/readyz after the oversized commands: %d %s", code, body)
		}
		// Another user's follow-up fires; the TwiML one is answered.
		if _, err := fake.WaitCalls(1, 30*time.Second); err != nil {
			t.Fatalf("the other user's follow-up did not fire: %v", err)
		}
		var twimlResult *pb.CallResult
		kafkatest.Consume(t, r.broker, string(topics.Results), nil, 30*time.Second, func(m *sarama.ConsumerMessage) bool {
			var res pb.CallResult
			if string(m.Key) == "twiml" && proto.Unmarshal(m.Value, &res) == nil { // the placement's answer
				twimlResult = &res
			}
			return twimlResult != nil
		})
		t.Logf("the inline TwiML's call: %s %q", twimlResult.GetOutcome(), twimlResult.GetDetail())
		calls := fake.Calls()
		for _, c := range calls {
			if to := c.Form.Get("To"); to == premium || c.Form.Get("Twiml") != "" || strings.Contains(c.Form.Encode(), "9005550199") {
				t.Errorf("the provider got a call to %s with %v", to, c.Form)
			}
		}
		if len(calls) != 1 || calls[0].Form.Get("To") != otherPhone {
			t.Errorf("the provider got %d calls %v; want the other user's only", len(calls), calls)
		}
	})
	if err := em.Finish(); err != nil {
		t.Fatal(err)
	}

	t.Run("a client without the token", func(t *testing.T) {
		for _, base := range []string{r.web, callbacks} {
			for _, path := range []string{"/", "/admin/user/other", "/admin/user/twiml", "/admin/upcoming",
				"/query/ivr-scheduler-table/other", "/query/ivr-dialer-table/other", "/query/", "/monitor/",
				"/ui/", "/ui/?user=other", "/policy", "/metrics", "/healthz", "/readyz", "/debug/pprof/",
				"/callbacks/twilio", "/callbacks/webhook"} {
				resp, err := http.Get("http://" + base + path)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				for _, phone := range []string{otherPhone, twimlPhone, premium, "+14155550144"} {
					if bytes.Contains(body, []byte(phone[2:])) {
						t.Errorf("GET %s%s without the token: %d with %s in full", base, path, resp.StatusCode, phone)
					}
				}
			}
		}
		// A 1 MiB multipart upload, sent as curl -F sends it (Expect:
		// 100-continue): answered before the server asks for the body.
		var form bytes.Buffer
		mw := multipart.NewWriter(&form)
		fw, err := mw.CreateFormFile("f", "upload.bin")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fw.Write(make([]byte, 1<<20)); err != nil {
			t.Fatal(err)
		}
		if err := mw.Close(); err != nil {
			t.Fatal(err)
		}
		client := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: 20 * time.Second}}
		defer client.CloseIdleConnections()
		for _, withToken := range []bool{false, true} {
			body := &countingReader{r: bytes.NewReader(form.Bytes())}
			req, err := http.NewRequestWithContext(r.ctx, http.MethodPost, "http://"+r.web+"/ui/run-now", body)
			if err != nil {
				t.Fatal(err)
			}
			req.ContentLength = int64(form.Len())
			req.Header.Set("Content-Type", mw.FormDataContentType())
			req.Header.Set("Expect", "100-continue")
			if withToken {
				req.SetBasicAuth("admin", token)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("upload (token %v): %v", withToken, err)
			}
			resp.Body.Close()
			if resp.StatusCode < 400 || body.n.Load() != 0 {
				t.Errorf("a 1 MiB multipart upload to /ui/run-now (token %v): %d after %d bytes of it were sent; want refused before any is read", withToken, resp.StatusCode, body.n.Load())
			}
		}
	})
	r.stop()
}

// countingReader counts the bytes read from r.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}
