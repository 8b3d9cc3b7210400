package template

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// setup writes files (path relative to the directory -> content) into a
// fresh directory and returns it; nil files gives an empty directory.
func setup(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for rel, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	return dir
}

// goodTemplate is a minimal valid email+sms template under code.
func goodTemplate(code string) map[string]string {
	return map[string]string{
		code + "/template.yaml":   "variables: [name]\nchannels: [email, sms]\n",
		code + "/en/subject.txt":  "Hello {{.name}}\n",
		code + "/en/body.html":    "<p>Hello {{.name}}</p>\n",
		code + "/en/body.txt":     "Hello {{.name}}\n",
		code + "/en/sms.txt":      "Hello {{.name}}\n",
		code + "/ja/subject.txt":  "こんにちは {{.name}}\n",
		code + "/ja/body.html":    "<p>こんにちは {{.name}}</p>\n",
		code + "/ja/body.txt":     "こんにちは {{.name}}\n",
		code + "/ja/sms.txt":      "こんにちは {{.name}}\n",
		code + "/.hidden/ignored": "editors leave these around",
	}
}

func load(t *testing.T, dir, locale string) *Store {
	t.Helper()
	s, err := Load(dir, locale)
	require.NoError(t, err)
	return s
}

func TestBuiltinsRender(t *testing.T) {
	t.Parallel()
	s := load(t, "", "en")
	require.Equal(t, []string{"notice", "verify_code"}, s.Codes())
	for _, tc := range []struct {
		code, locale string
		vars         map[string]string
		subject      string
		inHTML       []string
		inText       []string
		sms          string
	}{
		{
			code: "verify_code", locale: "en",
			vars:    map[string]string{"code": "482913", "ttlMinutes": "5"},
			subject: "Your verification code is 482913",
			inHTML:  []string{`lang="en"`, ">482913<", "expires in 5 minutes"},
			inText:  []string{"482913", "expires in 5 minutes"},
			sms:     "Your verification code is 482913. It expires in 5 minutes. Never share it with anyone.",
		},
		{
			code: "verify_code", locale: "zh-CN",
			vars:    map[string]string{"code": "482913", "ttlMinutes": "10"},
			subject: "您的验证码是 482913",
			inHTML:  []string{`lang="zh-CN"`, ">482913<", "验证码 10 分钟内有效"},
			inText:  []string{"482913", "验证码 10 分钟内有效"},
			sms:     "您的验证码是482913，10分钟内有效，请勿泄露给他人。",
		},
		{
			code: "notice", locale: "en",
			vars:    map[string]string{"title": "Maintenance", "content": "Back at 10:00 UTC."},
			subject: "Maintenance",
			inHTML:  []string{`lang="en"`, "<title>Maintenance</title>", ">Back at 10:00 UTC.<"},
			inText:  []string{"Maintenance\n\nBack at 10:00 UTC."},
			sms:     "Maintenance: Back at 10:00 UTC.",
		},
		{
			code: "notice", locale: "zh-CN",
			vars:    map[string]string{"title": "系统维护", "content": "十点恢复。"},
			subject: "系统维护",
			inHTML:  []string{`lang="zh-CN"`, ">系统维护</h1>", ">十点恢复。<"},
			inText:  []string{"系统维护\n\n十点恢复。"},
			sms:     "系统维护：十点恢复。",
		},
	} {
		t.Run(tc.code+"/"+tc.locale, func(t *testing.T) {
			t.Parallel()
			require.NoError(t, s.Validate(tc.code, Email, tc.vars))
			require.NoError(t, s.Validate(tc.code, SMS, tc.vars))
			e, err := s.RenderEmail(tc.code, tc.locale, tc.vars)
			require.NoError(t, err)
			require.Equal(t, tc.subject, e.Subject)
			for _, want := range tc.inHTML {
				require.Contains(t, e.HTML, want)
			}
			for _, want := range tc.inText {
				require.Contains(t, e.Text, want)
			}
			require.NotContains(t, e.Text, "<")
			sms, err := s.RenderSMS(tc.code, tc.locale, tc.vars)
			require.NoError(t, err)
			require.Equal(t, tc.sms, sms)
		})
	}
}

func TestHTMLBodyEscapesVariables(t *testing.T) {
	t.Parallel()
	s := load(t, "", "en")
	for _, tc := range []struct {
		name, title, content string
		notInHTML, inHTML    []string
	}{
		{
			name:      "script in content",
			title:     "Hi",
			content:   `<script>alert("x")</script>`,
			notInHTML: []string{"<script>"},
			inHTML:    []string{"&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;"},
		},
		{
			name:      "markup in title",
			title:     `</title><img src=x onerror=alert(1)>`,
			content:   "c",
			notInHTML: []string{"<img"},
			inHTML:    []string{"&lt;/title&gt;&lt;img src=x onerror=alert(1)&gt;"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, err := s.RenderEmail("notice", "en", map[string]string{"title": tc.title, "content": tc.content})
			require.NoError(t, err)
			for _, bad := range tc.notInHTML {
				require.NotContains(t, e.HTML, bad)
			}
			for _, want := range tc.inHTML {
				require.Contains(t, e.HTML, want)
			}
			// The text part is plain text: it carries the value as given.
			require.Contains(t, e.Text, tc.content)
			require.Equal(t, tc.title, e.Subject)
		})
	}
}

func TestRenderErrors(t *testing.T) {
	t.Parallel()
	files := goodTemplate("greet")
	files["emailonly/template.yaml"] = "variables: [name]\nchannels: [email]\n"
	files["emailonly/en/subject.txt"] = "{{.name}}"
	files["emailonly/en/body.html"] = "<p>{{.name}}</p>"
	files["emailonly/en/body.txt"] = "{{.name}}"
	s := load(t, setup(t, files), "en")
	verify := map[string]string{"code": "1234", "ttlMinutes": "5"}

	for _, tc := range []struct {
		name    string
		call    func() error
		want    error
		missing string // for MissingVariableError: the variable named
		inMsg   string
	}{
		{"unknown template email", func() error { _, err := s.RenderEmail("nope", "en", verify); return err }, ErrUnknownTemplate, "", `"nope"`},
		{"unknown template sms", func() error { _, err := s.RenderSMS("nope", "en", verify); return err }, ErrUnknownTemplate, "", `"nope"`},
		{"unknown template validate", func() error { return s.Validate("nope", Email, verify) }, ErrUnknownTemplate, "", `"nope"`},
		{"unknown template variables", func() error { _, err := s.Variables("nope"); return err }, ErrUnknownTemplate, "", `"nope"`},
		{"missing variable", func() error {
			_, err := s.RenderEmail("verify_code", "en", map[string]string{"code": "1234"})
			return err
		}, ErrMissingVariable, "ttlMinutes", "ttlMinutes"},
		{"blank variable", func() error {
			_, err := s.RenderSMS("verify_code", "en", map[string]string{"code": " ", "ttlMinutes": "5"})
			return err
		}, ErrMissingVariable, "code", `"code"`},
		{"missing variable validate", func() error { return s.Validate("notice", SMS, map[string]string{"title": "t"}) }, ErrMissingVariable, "content", "content"},
		{"channel not supported", func() error { _, err := s.RenderSMS("emailonly", "en", map[string]string{"name": "a"}); return err }, ErrUnsupportedChannel, "", "emailonly"},
		{"channel not supported validate", func() error { return s.Validate("emailonly", SMS, map[string]string{"name": "a"}) }, ErrUnsupportedChannel, "", "sms"},
		{"unknown channel", func() error {
			return s.Validate("notice", Channel("fax"), map[string]string{"title": "t", "content": "c"})
		}, ErrUnsupportedChannel, "", "fax"},
		{"CRLF in subject", func() error {
			_, err := s.RenderEmail("notice", "en", map[string]string{"title": "Hi\r\nBcc: victim@example.com", "content": "c"})
			return err
		}, ErrUnsafeSubject, "", "notice"},
		{"LF in subject validate", func() error {
			return s.Validate("notice", Email, map[string]string{"title": "Hi\nX: y", "content": "c"})
		}, ErrUnsafeSubject, "", ""},
		{"LF in subject of another locale validate", func() error {
			return s.Validate("greet", Email, map[string]string{"name": "a\nb"})
		}, ErrUnsafeSubject, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.call()
			require.ErrorIs(t, err, tc.want)
			require.Contains(t, err.Error(), tc.inMsg)
			var mv *MissingVariableError
			if tc.missing != "" {
				require.ErrorAs(t, err, &mv)
				require.Equal(t, tc.missing, mv.Name)
			} else {
				require.False(t, errors.As(err, &mv), "unexpected MissingVariableError: %v", err)
			}
		})
	}
}

func TestNewlinesOutsideSubjectAreFine(t *testing.T) {
	t.Parallel()
	s := load(t, "", "en")
	vars := map[string]string{"title": "Hi", "content": "line 1\nline 2", "unused": "extra variables are ignored"}
	require.NoError(t, s.Validate("notice", Email, vars))
	e, err := s.RenderEmail("notice", "en", vars)
	require.NoError(t, err)
	require.Contains(t, e.Text, "line 1\nline 2")
	require.Contains(t, e.HTML, "line 1\nline 2")
}

func TestLocaleFallback(t *testing.T) {
	t.Parallel()
	dir := setup(t, goodTemplate("jaonly"))
	// Reduce jaonly to a single locale that is neither requested nor default.
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "jaonly", "en")))
	vars := map[string]string{"code": "1", "ttlMinutes": "5", "name": "N"}
	for _, tc := range []struct {
		name, def, code, locale, wantPrefix string
	}{
		{"exact en", "zh-CN", "verify_code", "en", "Your"},
		{"exact zh-CN", "en", "verify_code", "zh-CN", "您的"},
		{"case-insensitive", "en", "verify_code", "ZH-cn", "您的"},
		{"same language en-US", "zh-CN", "verify_code", "en-US", "Your"},
		{"same language zh", "en", "verify_code", "zh", "您的"},
		{"unknown falls back to default en", "en", "verify_code", "fr", "Your"},
		{"unknown falls back to default zh-CN", "zh-CN", "verify_code", "fr", "您的"},
		{"empty is the default", "zh-CN", "verify_code", "", "您的"},
		{"any locale when default missing", "en", "jaonly", "fr", "こんにちは"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := load(t, dir, tc.def)
			sms, err := s.RenderSMS(tc.code, tc.locale, vars)
			require.NoError(t, err)
			require.True(t, strings.HasPrefix(sms, tc.wantPrefix), "got %q", sms)
		})
	}
}

func TestOverrideAndAdd(t *testing.T) {
	t.Parallel()
	files := goodTemplate("welcome")
	files["verify_code/template.yaml"] = "variables: [code]\nchannels: [sms]\n"
	files["verify_code/en/sms.txt"] = "Code {{.code}} (custom)\n"
	files["README.md"] = "files at the top are not templates"
	s := load(t, setup(t, files), "en")

	require.Equal(t, []string{"notice", "verify_code", "welcome"}, s.Codes())

	sms, err := s.RenderSMS("verify_code", "zh-CN", map[string]string{"code": "77"})
	require.NoError(t, err)
	require.Equal(t, "Code 77 (custom)", sms, "the override replaces the whole template, locales included")
	vars, err := s.Variables("verify_code")
	require.NoError(t, err)
	require.Equal(t, []string{"code"}, vars)
	_, err = s.RenderEmail("verify_code", "en", map[string]string{"code": "77"})
	require.ErrorIs(t, err, ErrUnsupportedChannel)

	e, err := s.RenderEmail("welcome", "en", map[string]string{"name": "Ann"})
	require.NoError(t, err)
	require.Equal(t, RenderedEmail{Subject: "Hello Ann", HTML: "<p>Hello Ann</p>\n", Text: "Hello Ann\n"}, e)

	n, err := s.RenderSMS("notice", "en", map[string]string{"title": "T", "content": "C"})
	require.NoError(t, err)
	require.Equal(t, "T: C", n, "built-ins not overridden stay")
}

func TestAccessors(t *testing.T) {
	t.Parallel()
	s := load(t, setup(t, goodTemplate("greet")), "zh-CN")
	require.Equal(t, "zh-CN", s.DefaultLocale())
	require.Equal(t, []string{"en", "ja", "zh-CN"}, s.Locales())
	for _, tc := range []struct {
		locale string
		want   bool
	}{{"en", true}, {"EN", true}, {"zh-cn", true}, {"ja", true}, {"fr", false}, {"", false}, {"en-US", false}} {
		require.Equal(t, tc.want, s.HasLocale(tc.locale), tc.locale)
	}
	vars, err := s.Variables("verify_code")
	require.NoError(t, err)
	require.Equal(t, []string{"code", "ttlMinutes"}, vars)
	vars[0] = "mutated"
	again, err := s.Variables("verify_code")
	require.NoError(t, err)
	require.Equal(t, "code", again[0], "Variables returns a copy")
	ch, err := s.Channels("notice")
	require.NoError(t, err)
	require.Equal(t, []Channel{Email, SMS, WeCom}, ch)
	_, err = s.Channels("nope")
	require.ErrorIs(t, err, ErrUnknownTemplate)
}

func TestLoadRejectsBrokenTemplates(t *testing.T) {
	t.Parallel()
	with := func(change func(map[string]string)) map[string]string {
		f := goodTemplate("greet")
		change(f)
		return f
	}
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  []string // substrings of the error
	}{
		{"syntax error", with(func(f map[string]string) { f["greet/en/body.html"] = "<p>{{.name</p>" }),
			[]string{filepath.Join("greet", "en", "body.html")}},
		{"unknown kind", with(func(f map[string]string) {
			f["greet/template.yaml"] = "variables: [name]\nchannels: [email, sms]\nkind: otp\n"
		}),
			[]string{"kind", "otp"}},
		{"undeclared variable", with(func(f map[string]string) { f["greet/ja/sms.txt"] = "{{.undeclared}}" }),
			[]string{filepath.Join("greet", "ja", "sms.txt"), "undeclared", "template.yaml"}},
		{"missing file", with(func(f map[string]string) { delete(f, "greet/en/body.txt") }),
			[]string{filepath.Join("greet", "en", "body.txt")}},
		{"misspelled file", with(func(f map[string]string) { f["greet/en/subjet.txt"] = "x" }),
			[]string{filepath.Join("greet", "en", "subjet.txt"), "unexpected file"}},
		{"file for a channel not listed", with(func(f map[string]string) { f["greet/template.yaml"] = "variables: [name]\nchannels: [email]\n" }),
			[]string{filepath.Join("greet", "en", "sms.txt"), "unexpected file"}},
		{"empty subject", with(func(f map[string]string) { f["greet/en/subject.txt"] = "  \n" }),
			[]string{filepath.Join("greet", "en", "subject.txt"), "renders to nothing"}},
		{"unknown meta field", with(func(f map[string]string) {
			f["greet/template.yaml"] = "variables: [name]\nchannels: [sms]\nchanels: [email]\n"
		}),
			[]string{filepath.Join("greet", "template.yaml"), "chanels"}},
		{"bad channel", with(func(f map[string]string) { f["greet/template.yaml"] = "variables: [name]\nchannels: [fax]\n" }),
			[]string{filepath.Join("greet", "template.yaml"), "fax"}},
		{"no channels", with(func(f map[string]string) { f["greet/template.yaml"] = "variables: [name]\n" }),
			[]string{filepath.Join("greet", "template.yaml"), "channels"}},
		{"bad variable name", with(func(f map[string]string) { f["greet/template.yaml"] = "variables: [first-name]\nchannels: [sms]\n" }),
			[]string{"first-name"}},
		{"missing meta", with(func(f map[string]string) { delete(f, "greet/template.yaml") }),
			[]string{filepath.Join("greet", "template.yaml")}},
		{"no locale", map[string]string{"greet/template.yaml": "channels: [sms]\n"},
			[]string{"greet", "no locale"}},
		{"bad locale dir", with(func(f map[string]string) { f["greet/english/sms.txt"] = "x" }),
			[]string{filepath.Join("greet", "english"), "locale"}},
		{"stray file in template", with(func(f map[string]string) { f["greet/notes.txt"] = "x" }),
			[]string{filepath.Join("greet", "notes.txt")}},
		{"bad code", with(func(f map[string]string) { f["bad code/template.yaml"] = "channels: [sms]\n" }),
			[]string{"bad code", "template code"}},
		{"not UTF-8", with(func(f map[string]string) { f["greet/en/sms.txt"] = "\xff\xfe" }),
			[]string{filepath.Join("greet", "en", "sms.txt"), "UTF-8"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := setup(t, tc.files)
			_, err := Load(dir, "en")
			require.Error(t, err)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestLoadArguments(t *testing.T) {
	t.Parallel()
	file := filepath.Join(setup(t, map[string]string{"f": "x"}), "f")
	for _, tc := range []struct {
		name, dir, locale, want string
	}{
		{"no such dir", filepath.Join(t.TempDir(), "absent"), "en", "TEMPLATES_DIR"},
		{"dir is a file", file, "en", "not a directory"},
		{"empty default locale", "", "", "default locale"},
		{"bad default locale", "", "en_US", "default locale"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Load(tc.dir, tc.locale)
			require.ErrorContains(t, err, tc.want)
		})
	}
	s, err := Load(setup(t, nil), "en")
	require.NoError(t, err, "an empty TEMPLATES_DIR is just the built-ins")
	require.Equal(t, []string{"notice", "verify_code"}, s.Codes())
}

func TestRenderWeComUsesTheTemplatesFormat(t *testing.T) {
	t.Parallel()
	s, err := Load("", "en")
	require.NoError(t, err)
	for _, tc := range []struct {
		code, locale, format, content string
		err                           error
	}{
		{"notice", "en", FormatMarkdown, "**Maintenance**\n\nTonight", nil},
		{"notice", "zh-CN", FormatMarkdown, "**Maintenance**\n\nTonight", nil},
		{"verify_code", "en", "", "", ErrUnsupportedChannel},
	} {
		got, err := s.RenderWeCom(tc.code, tc.locale, map[string]string{"title": "Maintenance", "content": "Tonight", "code": "123456", "ttlMinutes": "10"})
		if tc.err != nil {
			require.ErrorIs(t, err, tc.err)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, RenderedWeCom{Format: tc.format, Content: tc.content}, got)
	}
	dir := setup(t, map[string]string{"bad_format/template.yaml": "variables: [a]\nchannels: [wecom]\nwecomFormat: html\n", "bad_format/en/wecom.txt": "{{.a}}"})
	_, err = Load(dir, "en")
	require.ErrorContains(t, err, "wecomFormat")
}

// A template of kind code is for verification codes only: verify_code
// always (even overridden without the marker), and any marked kind: code.
func TestIsCode(t *testing.T) {
	t.Parallel()
	files := goodTemplate("otp")
	files["otp/template.yaml"] = "variables: [name]\nchannels: [email, sms]\nkind: code\n"
	for k, v := range goodTemplate("verify_code") { // an override without the marker
		files[k] = v
	}
	for k, v := range goodTemplate("greet") {
		files[k] = v
	}
	s := load(t, setup(t, files), "en")
	for code, want := range map[string]bool{"verify_code": true, "otp": true, "greet": false, "notice": false, "nope": false} {
		require.Equal(t, want, s.IsCode(code), code)
	}
	require.Equal(t, KindCode, load(t, "", "en").templates[VerifyCode].kind, "the built-in says so itself")
}

func TestWeComTextCardAndNewsTemplates(t *testing.T) {
	t.Parallel()
	card := "title: {{.title}}\nurl: {{.link}}\ndescription: {{.content}}\nsecond line\n"
	dir := setup(t, map[string]string{
		"deploy_card/template.yaml": "variables: [title, content, link]\nchannels: [wecom]\nwecomFormat: textcard\n",
		"deploy_card/en/wecom.txt":  card,
		"deploy_news/template.yaml": "variables: [title, content, link]\nchannels: [wecom]\nwecomFormat: news\n",
		"deploy_news/en/wecom.txt":  card,
	})
	s, err := Load(dir, "en")
	require.NoError(t, err)
	vars := map[string]string{"title": "Release 1.2", "content": "Rolled out", "link": "https://ci.example.com/r/12"}
	for code, format := range map[string]string{"deploy_card": FormatTextCard, "deploy_news": FormatNews} {
		got, err := s.RenderWeCom(code, "en", vars)
		require.NoError(t, err)
		require.Equal(t, format, got.Format)
		require.Equal(t, "Release 1.2", got.Title)
		require.Equal(t, "Rolled out\nsecond line", got.Description)
		require.Equal(t, "https://ci.example.com/r/12", got.URL)
	}
	vars["link"] = "javascript:alert(1)"
	_, err = s.RenderWeCom("deploy_card", "en", vars)
	require.ErrorContains(t, err, "not an http(s) URL")
}
