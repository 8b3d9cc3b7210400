package mailcatcher

import (
	"encoding/json"
	"html/template"
	"net/http"
	"slices"
	"sort"
	"strconv"
)

// Handler serves the web view:
//
//	GET    /                    list of messages, newest first
//	GET    /messages/{id}       one message: headers, text, HTML (sandboxed)
//	GET    /messages/{id}/raw   the message as received
//	GET    /api/messages        all messages as JSON, newest first
//	GET    /api/messages/{id}   one message as JSON
//	DELETE /api/messages        forget every message (Reset)
//
// Every value is escaped by html/template; the HTML part is shown only
// inside an iframe with an empty sandbox (no scripts, no same origin), and
// the Content-Security-Policy forbids scripts and remote loads besides.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.index)
	mux.HandleFunc("GET /messages/{id}", s.show)
	mux.HandleFunc("GET /messages/{id}/raw", s.raw)
	mux.HandleFunc("GET /api/messages", s.apiList)
	mux.HandleFunc("GET /api/messages/{id}", s.apiShow)
	mux.HandleFunc("DELETE /api/messages", func(w http.ResponseWriter, _ *http.Request) {
		s.Reset()
		w.WriteHeader(http.StatusNoContent)
	})
	return secure(mux)
}

func secure(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-src 'self'; base-uri 'none'; form-action 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		w.Header().Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}

func (s *Server) newestFirst() []Message {
	msgs := s.Messages()
	slices.Reverse(msgs)
	return msgs
}

func (s *Server) lookup(w http.ResponseWriter, r *http.Request) (Message, bool) {
	id, err := strconv.Atoi(r.PathValue("id"))
	if err != nil {
		http.Error(w, "message id must be a number", http.StatusBadRequest)
		return Message{}, false
	}
	m, ok := s.Message(id)
	if !ok {
		http.Error(w, "no such message (it may have been dropped: the catcher keeps the newest only)", http.StatusNotFound)
		return Message{}, false
	}
	return m, true
}

func (s *Server) index(w http.ResponseWriter, _ *http.Request) {
	render(w, indexPage, struct {
		Messages []Message
		Rejected int
	}{s.newestFirst(), s.Rejected()})
}

type headerLine struct{ Name, Value string }

func (s *Server) show(w http.ResponseWriter, r *http.Request) {
	m, ok := s.lookup(w, r)
	if !ok {
		return
	}
	names := make([]string, 0, len(m.Headers))
	for k := range m.Headers {
		names = append(names, k)
	}
	sort.Strings(names)
	var hs []headerLine
	for _, k := range names {
		for _, v := range m.Headers[k] {
			hs = append(hs, headerLine{k, v})
		}
	}
	render(w, messagePage, struct {
		Message
		HeaderLines []headerLine
	}{m, hs})
}

func (s *Server) raw(w http.ResponseWriter, r *http.Request) {
	m, ok := s.lookup(w, r)
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte(m.Raw))
}

func (s *Server) apiList(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, s.newestFirst())
}

func (s *Server) apiShow(w http.ResponseWriter, r *http.Request) {
	if m, ok := s.lookup(w, r); ok {
		writeJSON(w, m)
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // a write error means the client went away
}

func render(w http.ResponseWriter, t *template.Template, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := t.Execute(w, data); err != nil {
		// Headers are gone; all that is left is to cut the page short.
		_, _ = w.Write([]byte("\n<!-- render error -->"))
	}
}

const style = `<style>
body{font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:24px;color:#1f2328}
table{border-collapse:collapse;width:100%}
td,th{border-bottom:1px solid #d0d7de;padding:6px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa}
pre{background:#f6f8fa;padding:12px;white-space:pre-wrap;word-break:break-word}
iframe{width:100%;height:480px;border:1px solid #d0d7de}
.muted{color:#57606a}
</style>`

var indexPage = template.Must(template.New("index").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="5">
<title>mailcatcher</title>` + style + `</head><body>
<h1>mailcatcher</h1>
<p class="muted">{{len .Messages}} message(s), newest first; {{.Rejected}} refused on purpose. This page refreshes every 5 seconds.</p>
{{if .Messages}}<table>
<tr><th>#</th><th>Received</th><th>To</th><th>Subject</th></tr>
{{range .Messages}}<tr><td>{{.ID}}</td><td>{{.ReceivedAt.Format "15:04:05"}}</td><td>{{range $i, $t := .To}}{{if $i}}, {{end}}{{$t}}{{end}}</td><td><a href="/messages/{{.ID}}">{{if .Subject}}{{.Subject}}{{else}}(no subject){{end}}</a></td></tr>
{{end}}</table>{{else}}<p>No mail yet. Send something to this server over SMTP.</p>{{end}}
</body></html>
`))

var messagePage = template.Must(template.New("message").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{{.Subject}} - mailcatcher</title>` + style + `</head><body>
<p><a href="/">&larr; all messages</a> · <a href="/messages/{{.ID}}/raw">raw</a></p>
<h1>{{if .Subject}}{{.Subject}}{{else}}(no subject){{end}}</h1>
<p class="muted">#{{.ID}} from {{.From}} to {{range $i, $t := .To}}{{if $i}}, {{end}}{{$t}}{{end}}, received {{.ReceivedAt.Format "2006-01-02 15:04:05 MST"}}</p>
{{if .ParseError}}<p><strong>Could not parse fully:</strong> {{.ParseError}}</p>{{end}}
{{if .HTML}}<h2>HTML</h2>
<iframe sandbox="" referrerpolicy="no-referrer" srcdoc="{{.HTML}}"></iframe>{{end}}
{{if .Text}}<h2>Text</h2>
<pre>{{.Text}}</pre>{{end}}
<h2>Headers</h2>
<table>{{range .HeaderLines}}<tr><th>{{.Name}}</th><td>{{.Value}}</td></tr>{{end}}</table>
</body></html>
`))
