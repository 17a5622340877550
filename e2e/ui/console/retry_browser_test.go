package console_test

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/console"
	"github.com/weftrun/weft/internal/busyrunner"
)

// TestSemantics8_ConsoleStartFormKeepsItsIDsWhenNotKnown (docs/semantics.md §8;
// the browser, app.js): the run's owner takes the start and never answers.
// In the page, the start form (no run id typed) shows "Not known." — not
// "Refused" — keeps its command id, and holds the run id the console
// chose, so that pressing Start again sends the same start for the same
// run.
func TestSemantics8_ConsoleStartFormKeepsItsIDsWhenNotKnown(t *testing.T) {
	d := busyrunner.Start(t, busyrunner.Config{Agents: []*agent.Agent{busyrunner.Echo(t)}, Silent: true, Projector: true})
	c, err := console.New(d.Server.Conn, console.WithTimeout(time.Second), console.WithRetry(0))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c)
	// The page keeps its live-update stream open: closed first.
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
	ctx := tab(t)
	form := `form[action="/act/start"]`
	do(t, ctx, "open the runs page", chromedp.Navigate(srv.URL+"/runs"), chromedp.WaitVisible(chromedp.CSS(form)))
	id := js[string](t, ctx, `document.querySelector('`+form+` input[name=command_id]').value`)
	do(t, ctx, "start a run",
		typeIn(form+` input[name=agent]`, "notes"),
		typeIn(form+` input[name=input]`, "hello"),
		chromedp.Click(chromedp.CSS(form+` button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(form+` [data-result] p.answer`)))
	if got := js[string](t, ctx, `document.querySelector('`+form+` [data-result]').textContent`); !strings.HasPrefix(got, "Not known.") {
		t.Fatalf("the form shows %q, want Not known.", got)
	}
	if got := js[string](t, ctx, `document.querySelector('`+form+` input[name=command_id]').value`); got != id {
		t.Fatalf("the form's command id is %q, want %q (kept)", got, id)
	}
	fw := d.Forwarded()
	if len(fw) != 1 {
		t.Fatalf("forwarded %+v, want one try", fw)
	}
	if got := js[string](t, ctx, `document.querySelector('`+form+` input[name=run]').value`); got != fw[0].Run {
		t.Fatalf("the form's run id is %q, want %q, the run the try started", got, fw[0].Run)
	}
}
