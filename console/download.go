package console

import (
	"bytes"
	"mime"
	"net/http"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/auditexport"
)

// historyDownload serves GET /runs/<run>/history: the run's self-verifying
// export, the bytes `weft audit export <run>` writes — what
// auditexport.Read gathers (its events, void records and legal holds, or
// a holds_unread line when the console's credentials may not read them),
// written by Run.Write — as a file named <run>.jsonl. `weft audit verify
// --file` checks it offline.
func (c *Console) historyDownload(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := c.ctx(r)
	defer cancel()
	run := r.PathValue("run")
	x, err := auditexport.Read(ctx, c.js, run, auditexport.WithViolations(c.violations))
	if err == nil && len(x.Events) == 0 {
		err = weft.UnknownRun(run)
	}
	var b bytes.Buffer
	if err == nil {
		err = x.Write(&b)
	}
	if err != nil {
		we := asWeftError(err)
		status := http.StatusServiceUnavailable
		switch we.Code {
		case weft.CodeUnknownRun:
			status = http.StatusNotFound
		case weft.CodeInvalidName:
			status = http.StatusBadRequest
		}
		c.render(w, status, "error", page{Title: "History of " + run, Nav: "runs", Data: errorData{Title: "History of " + run, Err: we}})
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/jsonl")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": run + ".jsonl"}))
	_, _ = w.Write(b.Bytes())
}
