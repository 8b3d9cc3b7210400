package template

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"unicode"
)

// Markers around a variable, to find what it rendered to inside the HTML.
// html/template leaves these characters alone.
const openMark, closeMark = "⟦", "⟧"

func hasControl(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return unicode.IsControl(r) && r != '\t' }) >= 0
}

// FuzzRender renders the built-in templates with arbitrary variables and
// locales, as a hostile caller of the API could choose them. Rendering
// never panics; a rendered subject never holds CR, LF or another control
// character (it would write mail headers); what Validate accepts renders
// in every locale (the API's promise to the consumer); and a variable
// never reaches the HTML part unescaped.
func FuzzRender(f *testing.F) {
	s, err := Load("", "en")
	if err != nil {
		f.Fatal(err)
	}
	// Seeds: what the API sends, and the attacks it must defuse.
	f.Add(true, "en", "Maintenance", "Tonight 22:00-23:00", "483920", "10")
	f.Add(false, "zh-CN", "维护通知", "今晚 22:00-23:00\n第二行", "000123", "5")
	f.Add(true, "en-US", "Hi\r\nBcc: evil@attacker.test", "body\r\nBcc: evil@attacker.test", "12\r\n34", "1\n0")
	f.Add(true, "fr", "<script>alert(1)</script>", `"><img src=x onerror=alert(1)>`, "{{.code}}", "&amp;")
	f.Add(true, "zh", "\u0085next line\u2028sep", "\x00nul", " ", "\t")
	f.Fuzz(func(t *testing.T, notice bool, locale, title, content, code, ttl string) {
		tmpl, vars := "verify_code", map[string]string{"code": code, "ttlMinutes": ttl}
		if notice {
			tmpl, vars = "notice", map[string]string{"title": title, "content": content}
		}
		for _, ch := range []Channel{Email, SMS} {
			verr := s.Validate(tmpl, ch, vars)
			if verr != nil && !errors.Is(verr, ErrMissingVariable) && !errors.Is(verr, ErrUnsafeSubject) {
				t.Fatalf("Validate(%s, %s): an error the API cannot map to a 400: %v", tmpl, ch, verr)
			}
			switch ch {
			case Email:
				e, err := s.RenderEmail(tmpl, locale, vars)
				if verr == nil && err != nil {
					t.Fatalf("Validate accepted what RenderEmail(%q) refuses: %v", locale, err)
				}
				if err != nil {
					if !errors.Is(err, ErrMissingVariable) && !errors.Is(err, ErrUnsafeSubject) {
						t.Fatalf("RenderEmail: unexpected error kind: %v", err)
					}
					continue
				}
				if hasControl(e.Subject) {
					t.Fatalf("rendered subject holds a control character: %q", e.Subject)
				}
				if e.Subject != strings.TrimSpace(e.Subject) || e.Subject == "" {
					t.Fatalf("subject %q is empty or not trimmed", e.Subject)
				}
			case SMS:
				text, err := s.RenderSMS(tmpl, locale, vars)
				if verr == nil && err != nil {
					t.Fatalf("Validate accepted what RenderSMS(%q) refuses: %v", locale, err)
				}
				if err == nil && (text == "" || text != strings.TrimSpace(text)) {
					t.Fatalf("SMS text %q is empty or not trimmed", text)
				}
			}
		}
		checkHTMLEscapes(t, s, tmpl, locale, vars)
	})
}

// checkHTMLEscapes renders the HTML part with each variable between
// markers and checks that nothing between them can open a tag, an
// attribute or an entity.
func checkHTMLEscapes(t *testing.T, s *Store, tmpl, locale string, vars map[string]string) {
	t.Helper()
	for name, v := range vars {
		if strings.Contains(v, openMark) || strings.Contains(v, closeMark) {
			continue
		}
		marked := map[string]string{}
		for k, x := range vars {
			marked[k] = x
		}
		marked[name] = openMark + v + closeMark
		e, err := s.RenderEmail(tmpl, locale, marked)
		if err != nil {
			continue // refused (unsafe subject, blank): nothing rendered
		}
		rest := e.HTML
		for {
			i := strings.Index(rest, openMark)
			if i < 0 {
				break
			}
			rest = rest[i+len(openMark):]
			j := strings.Index(rest, closeMark)
			if j < 0 {
				t.Fatalf("variable %s: unterminated marker in HTML", name)
			}
			if seg := rest[:j]; strings.ContainsAny(seg, `<>"'`) || !entitiesOnly(seg) {
				t.Fatalf("variable %s reached the HTML unescaped: %q", name, seg)
			}
			rest = rest[j+len(closeMark):]
		}
	}
}

// entitiesOnly reports whether every & in s starts an entity html/template
// writes (&amp; &lt; &gt; &#34; &#39; &#43; &#xfffd;...).
func entitiesOnly(s string) bool {
	for {
		i := strings.IndexByte(s, '&')
		if i < 0 {
			return true
		}
		s = s[i+1:]
		j := strings.IndexByte(s, ';')
		if j < 1 || j > 8 {
			return false
		}
		ent := s[:j]
		if ent != "amp" && ent != "lt" && ent != "gt" && ent != "quot" && !strings.HasPrefix(ent, "#") {
			return false
		}
		s = s[j+1:]
	}
}

// FuzzLoad parses arbitrary template sources, as TEMPLATES_DIR could hold
// them: Load never panics, and a template it accepts renders (or refuses
// with an error) for any variables.
func FuzzLoad(f *testing.F) {
	f.Add("variables: [name]\nchannels: [email, sms]\n", "Hello {{.name}}\n", "<p>Hello {{.name}}</p>", "Hello {{.name}}", "Hi {{.name}}", "Bob")
	f.Add("variables: [title, content]\nchannels: [email]\n", "{{.title}}", `<a href="{{.content}}">{{.title}}</a>`, "{{.content}}", "", "javascript:alert(1)")
	f.Add("variables: [x]\nchannels: [sms]\n", "", "", "", "{{range .x}}{{.}}{{end}}", "\r\n")
	f.Add("variables: [x]\nchannels: [email]\n", `{{define "a"}}{{template "a"}}{{end}}{{template "a"}}`, "<p>{{.x}}</p>", "{{.x}}", "", "x")
	f.Add("variables: [x]\nchannels: [email]\n", "{{.x | printf \"%s\\r\\nBcc: e@x\"}}", "<p>{{.x}}</p>", "{{.x}}", "", "x")
	f.Fuzz(func(t *testing.T, meta, subject, html, text, sms, value string) {
		fsys := fstest.MapFS{"t/template.yaml": {Data: []byte(meta)}}
		for name, src := range map[string]string{subjectFile: subject, htmlFile: html, textFile: text, smsFile: sms} {
			if src != "" {
				fsys["t/en/"+name] = &fstest.MapFile{Data: []byte(src)}
			}
		}
		all, err := loadFS(fsys, func(rel string) string { return rel })
		if err != nil {
			return
		}
		s := &Store{defaultLocale: "en", templates: all}
		e := all["t"]
		vars := map[string]string{}
		for _, v := range e.vars {
			vars[v] = value
		}
		if slices.Contains(e.channels, Email) {
			if r, err := s.RenderEmail("t", "en", vars); err == nil && hasControl(r.Subject) {
				t.Fatalf("subject with a control character: %q", r.Subject)
			}
		}
		if slices.Contains(e.channels, SMS) {
			_, _ = s.RenderSMS("t", "en", vars)
		}
	})
}
