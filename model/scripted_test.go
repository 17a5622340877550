package model_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/weftrun/weft/model"
)

func request(turn int, transcript ...model.Message) model.Request {
	if len(transcript) == 0 {
		transcript = []model.Message{{Role: model.RoleUser, Text: "hello"}}
	}
	return model.Request{Run: "r", Turn: turn, Transcript: transcript}
}

func TestScriptedByTurn(t *testing.T) {
	m := model.NewScripted("t",
		model.CallTools(model.Call("lookup", `{"id":"x"}`), model.Call("lookup", `{"id":"y"}`)),
		model.Answer("done").WithUsage(nil),
		model.Fail(model.ErrRateLimited, "slow down"),
		model.Refuse("no"),
		model.Truncate("par"),
		func(context.Context, model.Request) (model.Reply, error) { panic("bug") },
	)
	ctx := context.Background()
	if m.Name() != "scripted:t" {
		t.Errorf("Name = %s", m.Name())
	}
	r, err := m.Complete(ctx, request(1))
	if err != nil || r.Kind != model.ReplyToolRequest || len(r.Turn.Calls) != 2 || r.Turn.Calls[0].ID != "call_1_1" || r.Turn.Calls[1].ID != "call_1_2" ||
		string(r.Turn.Calls[1].Arguments) != `{"id":"y"}` || r.Usage == nil || r.Usage.Total() != 15 {
		t.Errorf("turn 1: %+v %v", r, err)
	}
	// The same turn again (a recovered run) gets the same reply.
	again, _ := m.Complete(ctx, request(1))
	a, _ := json.Marshal(r)
	b, _ := json.Marshal(again)
	if string(a) != string(b) {
		t.Errorf("turn 1 replayed differently:\n%s\n%s", a, b)
	}
	if r, err := m.Complete(ctx, request(2)); err != nil || r.Kind != model.ReplyFinalAnswer || r.Turn.Text != "done" || r.Usage != nil {
		t.Errorf("turn 2: %+v %v", r, err)
	}
	kinds := map[int]model.ErrorKind{3: model.ErrRateLimited, 6: model.ErrCrashed, 7: model.ErrInvalidRequest}
	for turn, kind := range kinds {
		_, err := m.Complete(ctx, request(turn))
		var me *model.Error
		if !errors.As(err, &me) || me.Kind != kind {
			t.Errorf("turn %d: %v, want %s", turn, err, kind)
		}
	}
	if r, _ := m.Complete(ctx, request(4)); r.Kind != model.ReplyRefusal || r.Reason != "no" {
		t.Errorf("turn 4: %+v", r)
	}
	if r, _ := m.Complete(ctx, request(5)); r.Kind != model.ReplyTruncated || r.Reason != "par" {
		t.Errorf("turn 5: %+v", r)
	}
	if n := len(m.Requests()); n != 8 {
		t.Errorf("%d requests recorded, want 8", n)
	}
}

func TestScriptedHangStopsWithContext(t *testing.T) {
	m := model.NewScripted("t", model.Hang(), model.Answer("ok"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := m.Complete(ctx, request(1))
	var me *model.Error
	if !errors.As(err, &me) || me.Kind != model.ErrTimedOut {
		t.Fatalf("hang: %v, want timed_out", err)
	}
	if r, err := m.Complete(context.Background(), request(2)); err != nil || r.Turn.Text != "ok" {
		t.Errorf("turn 2: %+v %v", r, err)
	}
}

func TestRulesAndHelpers(t *testing.T) {
	m := model.NewRules("r",
		model.Rule{Name: "after lookup", Match: func(req model.Request) bool { _, ok := model.ResultOf(req, "lookup"); return ok }, Step: model.Answer("found")},
		model.Rule{Name: "lookup", Match: model.InputContains("FIND", "x"), Step: model.CallTools(model.Call("lookup", `{}`))},
	)
	ctx := context.Background()
	user := model.Message{Role: model.RoleUser, Text: "please find x"}
	r, _ := m.Complete(ctx, request(1, user))
	if r.Kind != model.ReplyToolRequest {
		t.Fatalf("turn 1: %+v", r)
	}
	tool := model.Message{Role: model.RoleTool, Results: []model.ToolResult{{CallID: "call_1_1", Name: "lookup", Content: json.RawMessage(`{"v":1}`)}}}
	req := request(2, user, r.Turn, tool)
	if got := model.Results(req); len(got) != 1 || string(got[0].Content) != `{"v":1}` {
		t.Errorf("Results = %+v", got)
	}
	if model.Input(req) != "please find x" {
		t.Errorf("Input = %q", model.Input(req))
	}
	if r, _ := m.Complete(ctx, req); r.Turn.Text != "found" {
		t.Errorf("turn 2: %+v", r)
	}
	if r, _ := m.Complete(ctx, request(1, model.Message{Role: model.RoleUser, Text: "something else"})); r.Turn.Text != "I cannot help with that." {
		t.Errorf("no rule: %+v", r)
	}
	if model.Results(request(1)) != nil {
		t.Error("Results of a transcript ending with a user message")
	}
	// Requests are copies: changing one does not change the record.
	reqs := m.Requests()
	reqs[0].Transcript[0].Text = "changed"
	if m.Requests()[0].Transcript[0].Text != "please find x" {
		t.Error("Requests returned shared memory")
	}
}
