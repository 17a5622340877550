package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/weftrun/weft/projections"
)

// page is what every template gets.
type page struct {
	// Title is the page's title.
	Title string
	// Nav names the navigation entry of the page ("inbox", "runs").
	Nav string
	// Live is the query of the page's live stream (/live?<Live>), empty
	// for a page that does not update itself.
	Live string
	// Flash is the answer to the form just sent without the script.
	Flash *flash
	// Data is the page's own data.
	Data any
}

// flash is the outcome of an action, shown at the top of the page.
type flash struct {
	OK bool
	// Unknown: whether the command took effect is not known (answer).
	Unknown bool
	// Start, after a start whose outcome is not known, is the start form
	// to show again as it was sent.
	Start   *startForm
	Code    string
	Reason  string
	Message string
	// Link, when set, is where the outcome can be seen (a started run).
	Link string
	// Sign, when set, is the signing statement of the person's command
	// just sent: the weft command that signs it and the form to send it
	// again with the proof pasted.
	Sign *signing
}

// field is one member of a JSON object, rendered readably.
type field struct {
	Name string
	// Text is a scalar's text (a string without its quotes).
	Text string
	// JSON is a nested value, indented.
	JSON string
}

var funcs = template.FuncMap{
	"when":     when,
	"fields":   fields,
	"pretty":   pretty,
	"rawtext":  rawText,
	"query":    func(v url.Values) string { return v.Encode() },
	"join":     strings.Join,
	"add":      func(a, b int) int { return a + b },
	"statusOf": statusClass,
	// person is who made a person's command, for the "who" template.
	"person": func(by string, verified bool) projections.PersonView {
		return projections.PersonView{By: by, Verified: verified}
	},
	"outField": func(key string, f formField) outFieldData {
		return outFieldData{ID: key + "-out-" + projectionsKey(f.Name), F: f}
	},
}

// outFieldData is what the out-field template gets: the input's DOM id and
// the field.
type outFieldData struct {
	ID string
	F  formField
}

// projectionsKey makes a property name safe in a DOM id.
func projectionsKey(s string) string {
	var b strings.Builder
	for _, r := range s {
		if (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') || r == '_' || r == '-' {
			b.WriteRune(r)
		} else {
			fmt.Fprintf(&b, "_%x", r)
		}
	}
	return b.String()
}

// parseTemplates parses the layout and partials once per page template, so
// that each page defines its own "content".
func parseTemplates() (map[string]*template.Template, error) {
	base, err := template.New("base").Funcs(funcs).ParseFS(assets, "assets/templates/partials/*.html")
	if err != nil {
		return nil, fmt.Errorf("console: templates: %w", err)
	}
	names, err := fs.Glob(assets, "assets/templates/*.html")
	if err != nil {
		return nil, err
	}
	out := map[string]*template.Template{}
	for _, n := range names {
		t, err := base.Clone()
		if err != nil {
			return nil, err
		}
		if _, err := t.ParseFS(assets, n); err != nil {
			return nil, fmt.Errorf("console: template %s: %w", n, err)
		}
		key := strings.TrimSuffix(n[strings.LastIndex(n, "/")+1:], ".html")
		out[key] = t
	}
	return out, nil
}

// render writes the page template name with p.
func (c *Console) render(w http.ResponseWriter, status int, name string, p page) {
	var b bytes.Buffer
	if err := c.pages[name].ExecuteTemplate(&b, "layout", p); err != nil {
		c.log.Error("console: render", "page", name, "err", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// when renders a time as a <time> element: the recorded UTC time as text
// and title, which the script replaces by the viewer's zone (keeping the
// UTC in the title). kind "" is a plain time, "precise" one with
// milliseconds (the timeline), "countdown" counts down to it, "age" counts
// up from it.
func when(t any, kind string) template.HTML {
	var tt time.Time
	switch v := t.(type) {
	case time.Time:
		tt = v
	case *time.Time:
		if v == nil {
			return template.HTML(`<span class="muted">never</span>`)
		}
		tt = *v
	default:
		return ""
	}
	if tt.IsZero() {
		return template.HTML(`<span class="muted">—</span>`)
	}
	u := tt.UTC()
	attr := ""
	if kind != "" {
		attr = fmt.Sprintf(` data-%s`, template.HTMLEscapeString(kind))
	}
	return template.HTML(fmt.Sprintf(`<time datetime="%s"%s title="%s UTC">%s UTC</time>`,
		u.Format(time.RFC3339Nano), attr, u.Format("2006-01-02 15:04:05.000"), u.Format("2006-01-02 15:04:05")))
}

// fields lists a JSON object's members in their order, for reading; a value
// that is not an object is one field without a name.
func fields(raw json.RawMessage) []field {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil
	}
	members, ok := objectMembers(raw)
	if !ok {
		return []field{valueField("", raw)}
	}
	out := make([]field, 0, len(members))
	for _, m := range members {
		out = append(out, valueField(m.name, m.value))
	}
	return out
}

func valueField(name string, v json.RawMessage) field {
	var s string
	if t := bytes.TrimSpace(v); len(t) > 0 && t[0] == '"' && json.Unmarshal(t, &s) == nil {
		return field{Name: name, Text: s}
	}
	switch t := bytes.TrimSpace(v); {
	case len(t) > 0 && (t[0] == '{' || t[0] == '['):
		return field{Name: name, JSON: pretty(t)}
	default:
		return field{Name: name, Text: string(t)}
	}
}

type member struct {
	name  string
	value json.RawMessage
}

// objectMembers returns an object's members in document order.
func objectMembers(raw json.RawMessage) ([]member, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if d, ok := tok.(json.Delim); err != nil || !ok || d != '{' {
		return nil, false
	}
	var out []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		name, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		out = append(out, member{name, v})
	}
	return out, true
}

// pretty indents JSON; text that is not JSON is returned as it is.
func pretty(raw any) string {
	var b []byte
	switch v := raw.(type) {
	case json.RawMessage:
		b = v
	case []byte:
		b = v
	case string:
		b = []byte(v)
	default:
		b, _ = json.Marshal(v)
	}
	var out bytes.Buffer
	if json.Indent(&out, bytes.TrimSpace(b), "", "  ") != nil {
		return string(b)
	}
	return out.String()
}

// rawText is a JSON value as text: a string without quotes, anything else
// as compact JSON.
func rawText(raw json.RawMessage) string {
	var s string
	if t := bytes.TrimSpace(raw); len(t) > 0 && t[0] == '"' && json.Unmarshal(t, &s) == nil {
		return s
	}
	return string(raw)
}

// statusClass is the CSS class of a run or action status badge.
func statusClass(s string) string {
	switch s {
	case "suspended", "awaiting_approval", "uncertain", "unattended":
		return "warn"
	case "finished", "succeeded", "reconciled", "child_settled":
		return "ok"
	case "tool_failed", "denied", "rejected", "invalid_arguments", "unknown_tool", "faulted", "not_started", "limit_reached":
		return "bad"
	}
	return "info"
}
