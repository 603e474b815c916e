package main

import (
	"strings"
	"testing"
	"time"

	"github.com/lovoo/goka"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/topology"
)

// A result written to ivr-results before the providers masked their text
// still quotes a number in its detail: the web page shows it masked, even
// to the token's holder, and the admin API shows the user's phone masked
// unless the request carries the token and asks for phones, as `show
// --show-phone` does.
func TestOldResultDetailIsMaskedOnDisplay(t *testing.T) {
	const token = "s3cret-admin-token-16+"
	t.Setenv(adminTokenEnv, token)
	r := startRun(t)
	r.token = token
	const phone = "4155550123"
	r.cli("onboard", "--user", "old-result", "--phone", "+1"+phone, "--task", "t1", "--delay", "10h")
	em, err := goka.NewEmitter([]string{r.broker}, topology.NewTopics("").Results, new(codec.CallResult))
	if err != nil {
		t.Fatal(err)
	}
	res := &pb.CallResult{CallId: "c1", UserId: "old-result", TaskId: "t1", Outcome: pb.Outcome_OUTCOME_FAILED, Final: true,
		Detail: "400: The 'To' number +1" + phone + " is not a valid phone number", At: timestamppb.Now()}
	if err := em.EmitSync("old-result", res); err != nil {
		t.Fatal(err)
	}
	if err := em.Finish(); err != nil {
		t.Fatal(err)
	}
	r.awaitReady()

	_, page := r.get("/ui/", true)
	if !strings.Contains(page, "is not a valid phone number") {
		t.Fatalf("the page does not list the result:\n%s", page)
	}
	if strings.Contains(page, phone) {
		t.Errorf("the page shows the result's detail with the full number:\n%s", page)
	}
	var body string
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(body, "t1"); time.Sleep(20 * time.Millisecond) { // the table has no event to await
		if _, body = r.get("/admin/user/old-result", true); time.Now().After(deadline) {
			t.Fatalf("/admin/user/old-result: no value: %s", body)
		}
	}
	if strings.Contains(body, phone) {
		t.Errorf("/admin/user/ with the token, not asking for phones: the full number: %s", body)
	}
	if _, body := r.get("/admin/user/old-result?phones=full", true); !strings.Contains(body, phone) {
		t.Errorf("/admin/user/?phones=full with the token: no full number: %s", body)
	}
	if out := r.cli("show", "--user", "old-result", "--show-phone"); !strings.Contains(out, "+1"+phone) {
		t.Errorf("show --show-phone:\n%s", out)
	}
	if out := r.cli("show", "--user", "old-result"); strings.Contains(out, phone) {
		t.Errorf("show:\n%s", out)
	}
	r.stop()
}
