package console_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/console"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/demo"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/proof"
	"github.com/weftrun/weft/roles"
)

// TestReaderConsoleApproveNamesTheRole (docs/security.md, the roles;
// docs/protocol.md, permission_denied): a console whose connection has
// the reader's credentials, on weft dev --secure --require-identity,
// answers an approve — signed with the approver's key, so that only the
// credentials stand in its way — permission_denied at once, naming the
// subject and the role whose credentials may (operator), as the CLI does;
// nothing is recorded. Before, it named the subject only.
func TestReaderConsoleApproveNamesTheRole(t *testing.T) {
	s := secureStack(t)
	kp, _ := s.ApproverKey(t)
	v := s.Start(t, "denied-7", "pay invoice INV-7", "suspended")
	subj, err := v.ProofSubject("2/call_2_1", 0, events.AnswerApprove)
	if err != nil {
		t.Fatal(err)
	}
	if subj, err = subj.Answering(events.AnswerApprove, ""); err != nil {
		t.Fatal(err)
	}
	signed, err := proof.SignAnswer(subj, kp, time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := json.Marshal(signed)

	// A minute's deadline: a console waiting for an answer would answer
	// "not known" once it ended, not permission_denied.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reader, err := natsnode.Start(ctx, natsnode.WithURL(s.NATSURL), natsnode.WithCredsFile(filepath.Join(s.Roles, roles.CredsFile(roles.Reader, api.Queue{}))))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close(context.Background())
	c, err := console.New(reader.Conn(), console.WithTimeout(time.Minute), console.WithRetry(0))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c)
	defer srv.Close()
	form := url.Values{"command_id": {"console-reader-1"}, "run": {"denied-7"}, "action": {"2/call_2_1"}, "revision": {"1"},
		"agent": {demo.AgentName}, "approver": {demo.SignedApprover}, "proof": {string(p)}, "decision": {"approve"}, "return": {"/"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/act/approval", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var ans struct {
		OK      bool   `json:"ok"`
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(b, &ans); err != nil {
		t.Fatalf("answer %s: %v", b, err)
	}
	if ans.OK || ans.Code != "permission_denied" || !strings.Contains(ans.Message, "publish to weft.api.approve; the credentials of role operator may") {
		t.Fatalf("the reader's console answered %s, want permission_denied naming weft.api.approve and role operator", b)
	}
	if n := len(s.History(t, "denied-7", events.NameApprovalAnswered)); n != 0 {
		t.Fatalf("%d answers recorded, want none", n)
	}
}
