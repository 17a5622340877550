package console

import (
	"bytes"
	"mime"
	"net/http"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/audit"
)

// historyDownload serves GET /runs/<run>/history: the run's self-verifying
// export, the bytes `weft audit export <run>` writes (audit.Export of the
// history as stored, read through the query service), as a file named
// <run>.jsonl. `weft audit verify --file` checks it offline.
func (c *Console) historyDownload(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := c.ctx(r)
	defer cancel()
	run := r.PathValue("run")
	envs, _, err := c.history(ctx, run)
	if err == nil && len(envs) == 0 {
		err = weft.UnknownRun(run)
	}
	var b bytes.Buffer
	if err == nil {
		err = audit.Export(&b, envs)
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
