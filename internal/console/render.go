package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"time"

	"github.com/holdfast-dev/holdfast/controlapi"
)

// page is what every template gets: the layout's part, and the page's
// own in Data.
type page struct {
	Title    string
	Nav      string
	Name     string // the signed-in identity ("" when not signed in)
	Open     bool
	SignedIn bool
	CSRF     string
	Error    string
	Data     any
}

// pageNames are the templates, each one page over layout.html.
var pageNames = []string{"signin", "error", "namespaces", "namespace", "changes", "change", "rollouts", "rollout", "fleet", "audit", "propose"}

func (c *Console) parse() error {
	layout, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html")
	if err != nil {
		return fmt.Errorf("console: %w", err)
	}
	c.pages = make(map[string]*template.Template, len(pageNames))
	for _, name := range pageNames {
		t, err := template.Must(layout.Clone()).ParseFS(templateFS, "templates/"+name+".html")
		if err != nil {
			return fmt.Errorf("console: %w", err)
		}
		c.pages[name] = t
	}
	return nil
}

var funcs = template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"pct":  func(f float64) string { return fmt.Sprintf("%g%%", f) },
	"join": strings.Join,
	"add":  func(a, b int) int { return a + b },
	"list": func(s ...string) []string { return s },
	// title is an action's name as its button shows it: "approve" →
	// "Approve".
	"title": func(s string) string {
		if s == "" {
			return s
		}
		return strings.ToUpper(s[:1]) + s[1:]
	},
}

// render writes page name with status.
func (c *Console) render(w http.ResponseWriter, r *http.Request, rq *request, status int, name string, p page) {
	if rq != nil {
		p.Name, p.Open, p.SignedIn, p.CSRF = rq.name, rq.open, true, rq.sess.CSRF
	} else {
		p.Open = c.cfg.Open()
	}
	var buf bytes.Buffer
	if err := c.pages[name].ExecuteTemplate(&buf, "layout.html", p); err != nil {
		c.log.Error("console: rendering", "page", name, "err", err)
		http.Error(w, "rendering the page failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail renders the error page.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, rq *request, status int, msg string) {
	c.render(w, r, rq, status, "error", page{Title: http.StatusText(status), Error: msg})
}

// failAPI renders an error of the control API with the API's status.
func (c *Console) failAPI(w http.ResponseWriter, r *http.Request, rq *request, err error) {
	var ae *apiError
	if errors.As(err, &ae) {
		c.fail(w, r, rq, ae.Status, ae.Error())
		return
	}
	c.fail(w, r, rq, http.StatusInternalServerError, err.Error())
}

// valueRow is one key of a namespace as a page shows it.
type valueRow struct {
	Key, Type, Value string
	Long             bool // folded: shown under a <details>
}

// foldAt is the length past which a value is folded.
const foldAt = 120

func newValueRow(key string, raw json.RawMessage) valueRow {
	v := compact(raw)
	return valueRow{Key: key, Type: jsonType(raw), Value: v, Long: len(v) > foldAt || strings.Contains(v, "\n")}
}

// jsonType names a JSON value's type: string, int, number, bool, object,
// array, null.
func jsonType(raw json.RawMessage) string {
	s := bytes.TrimSpace(raw)
	if len(s) == 0 {
		return "—"
	}
	switch s[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	}
	if bytes.ContainsAny(s, ".eE") {
		return "number"
	}
	return "int"
}

// compact is raw as a person reads it: without insignificant white
// space, and with the characters it escaped (\u003c for <) as
// themselves; the template escapes the page's HTML.
func compact(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return string(raw)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return string(raw)
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

// diffLine is one key of a semantic diff: "KEY: OLD → NEW", added,
// removed, and a change of type.
type diffLine struct {
	Key, Kind, Old, New, Types string
}

func semanticDiff(changes []controlapi.KeyChange) []diffLine {
	out := make([]diffLine, 0, len(changes))
	for _, ch := range changes {
		l := diffLine{Key: ch.Key, Old: compact(ch.Old), New: compact(ch.New)}
		switch {
		case len(ch.Old) == 0:
			l.Kind = "added"
		case len(ch.New) == 0:
			l.Kind = "removed"
		default:
			l.Kind = "changed"
			if ot, nt := jsonType(ch.Old), jsonType(ch.New); ot != nt {
				l.Types = ot + " → " + nt
			}
		}
		out = append(out, l)
	}
	return out
}

func jsonIndent(buf *bytes.Buffer, raw json.RawMessage) error { return json.Indent(buf, raw, "", "  ") }
