package template

import (
	"bytes"
	"errors"
	"fmt"
	htmltemplate "html/template"
	"maps"
	"slices"
	"sort"
	"strings"
	texttemplate "text/template"
	"unicode"
)

// Channel is a way of delivering a message.
type Channel string

// Channels a template may support.
const (
	Email Channel = "email"
	SMS   Channel = "sms"
	WeCom Channel = "wecom" // WeCom application messages and group robots
)

// WeCom message formats: a template says which its wecom.txt is written in.
const (
	FormatText     = "text"
	FormatMarkdown = "markdown"
)

// Errors for errors.Is. Every error Validate and the Render methods return
// matches one of these, so the API can map it to a 400 without parsing text.
var (
	ErrUnknownTemplate    = errors.New("unknown template")
	ErrMissingVariable    = errors.New("missing template variable")
	ErrUnsupportedChannel = errors.New("template does not support this channel")
	// ErrUnsafeSubject: a variable put a line break (or another control
	// character) into the subject, which would let it write mail headers.
	ErrUnsafeSubject = errors.New("rendered subject contains a line break or control character")
	// ErrRender is an execution failure of a template that passed Load's
	// trial run; it should not happen, but it is an error, not a panic.
	ErrRender = errors.New("template rendering failed")
)

// MissingVariableError names a variable the template requires that the
// caller did not give (or gave blank: an empty code or title is never what
// the caller meant to send).
type MissingVariableError struct {
	Template string
	Name     string
}

func (e *MissingVariableError) Error() string {
	return fmt.Sprintf("template %q: missing variable %q", e.Template, e.Name)
}

// Is makes errors.Is(err, ErrMissingVariable) hold.
func (e *MissingVariableError) Is(target error) bool { return target == ErrMissingVariable }

// RenderedEmail is a rendered email. (It cannot be called Email: that name
// is the Channel constant the API passes to Validate.)
type RenderedEmail struct {
	Subject string
	HTML    string
	Text    string
}

// File names inside a template directory.
// Store holds every template, parsed. It is read-only after Load and safe
// for concurrent use.
type Store struct {
	defaultLocale string
	templates     map[string]*entry
}

type entry struct {
	code        string
	description string
	vars        []string
	channels    []Channel
	wecomFormat string                // text or markdown
	kind        string                // KindCode or "" (a notice)
	locales     map[string]*localized // by lower-cased locale
	order       []string              // lower-cased locales, sorted: "any locale" is deterministic
}

type localized struct {
	name    string // as spelled on disk, e.g. "zh-CN"
	subject *texttemplate.Template
	text    *texttemplate.Template
	html    *htmltemplate.Template
	sms     *texttemplate.Template
	wecom   *texttemplate.Template
}

// KindCode is the kind of a template that carries a verification code.
const KindCode = "code"

// VerifyCode is the template verification codes are sent with. It is of
// kind code whatever its template.yaml says, so that a TEMPLATES_DIR
// override that forgets the marker cannot reopen it to messages.
const VerifyCode = "verify_code"

// DefaultLocale is the locale used when a template lacks the requested one.
func (s *Store) DefaultLocale() string { return s.defaultLocale }

// Codes returns every template code, sorted.
func (s *Store) Codes() []string {
	out := make([]string, 0, len(s.templates))
	for c := range s.templates {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// Variables returns the variables template code requires, in the order
// its template.yaml lists them.
func (s *Store) Variables(code string) ([]string, error) {
	e, err := s.entry(code)
	if err != nil {
		return nil, err
	}
	return slices.Clone(e.vars), nil
}

// Channels returns the channels template code supports.
func (s *Store) Channels(code string) ([]Channel, error) {
	e, err := s.entry(code)
	if err != nil {
		return nil, err
	}
	return slices.Clone(e.channels), nil
}

// IsCode reports whether template code carries a verification code
// (VerifyCode, or kind: code in its template.yaml): such a template is for
// POST /api/verification-codes only. An unknown code is not one.
func (s *Store) IsCode(code string) bool {
	if code == VerifyCode {
		return true
	}
	e, ok := s.templates[code]
	return ok && e.kind == KindCode
}

// WeComFormat returns the format (text or markdown) template code renders
// to on WeCom.
func (s *Store) WeComFormat(code string) (string, error) {
	e, err := s.entry(code)
	if err != nil {
		return "", err
	}
	return e.wecomFormat, nil
}

// Locales returns every locale some template has, sorted.
func (s *Store) Locales() []string {
	set := map[string]bool{}
	for _, e := range s.templates {
		for _, l := range e.locales {
			set[l.name] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// HasLocale reports whether some template has exactly this locale (case
// does not matter). Rendering an unknown locale still works: it falls back.
func (s *Store) HasLocale(locale string) bool {
	k := strings.ToLower(locale)
	for _, e := range s.templates {
		if _, ok := e.locales[k]; ok {
			return true
		}
	}
	return false
}

// Validate checks that template code exists, supports ch, and gets every
// variable it requires, and for email that no locale's subject would carry
// a line break. It is what the API calls before accepting a request, so a
// message it accepts cannot fail to render later.
func (s *Store) Validate(code string, ch Channel, vars map[string]string) error {
	e, data, err := s.prepare(code, ch, vars)
	if err != nil {
		return err
	}
	if ch == Email {
		for _, k := range e.order {
			if _, err := renderSubject(e, e.locales[k], data); err != nil {
				return err
			}
		}
	}
	return nil
}

// RenderEmail renders template code as an email in locale (falling back to
// the default locale, then to any locale the template has).
func (s *Store) RenderEmail(code, locale string, vars map[string]string) (RenderedEmail, error) {
	e, data, err := s.prepare(code, Email, vars)
	if err != nil {
		return RenderedEmail{}, err
	}
	l := e.pick(locale, s.defaultLocale)
	subject, err := renderSubject(e, l, data)
	if err != nil {
		return RenderedEmail{}, err
	}
	var html, text bytes.Buffer
	if err := l.html.Execute(&html, data); err != nil {
		return RenderedEmail{}, fmt.Errorf("%w: %w", ErrRender, err)
	}
	if err := l.text.Execute(&text, data); err != nil {
		return RenderedEmail{}, fmt.Errorf("%w: %w", ErrRender, err)
	}
	return RenderedEmail{Subject: subject, HTML: html.String(), Text: text.String()}, nil
}

// RenderSMS renders template code as an SMS text in locale (with the same
// fallback as RenderEmail). Surrounding white space is removed: a trailing
// newline in sms.txt would cost an SMS segment.
func (s *Store) RenderSMS(code, locale string, vars map[string]string) (string, error) {
	e, data, err := s.prepare(code, SMS, vars)
	if err != nil {
		return "", err
	}
	var out bytes.Buffer
	if err := e.pick(locale, s.defaultLocale).sms.Execute(&out, data); err != nil {
		return "", fmt.Errorf("%w: %w", ErrRender, err)
	}
	return strings.TrimSpace(out.String()), nil
}

// RenderedWeCom is a rendered WeCom message: its msgtype (text or
// markdown) and content.
type RenderedWeCom struct {
	Format  string
	Content string
	// Title, Description and URL are a textcard's or a news article's,
	// read from the rendered wecom.txt (see parseCard).
	Title, Description, URL string
}

// RenderWeCom renders template code for WeCom in locale (with the same
// fallback as RenderEmail), in the format its template.yaml names.
func (s *Store) RenderWeCom(code, locale string, vars map[string]string) (RenderedWeCom, error) {
	e, data, err := s.prepare(code, WeCom, vars)
	if err != nil {
		return RenderedWeCom{}, err
	}
	var out bytes.Buffer
	if err := e.pick(locale, s.defaultLocale).wecom.Execute(&out, data); err != nil {
		return RenderedWeCom{}, fmt.Errorf("%w: %w", ErrRender, err)
	}
	r := RenderedWeCom{Format: e.wecomFormat, Content: strings.TrimSpace(out.String())}
	if r.Format == FormatTextCard || r.Format == FormatNews {
		if r.Title, r.Description, r.URL, err = parseCard(r.Content); err != nil {
			return RenderedWeCom{}, fmt.Errorf("template %q (%s): %w", code, r.Format, err)
		}
	}
	return r, nil
}

func (s *Store) entry(code string) (*entry, error) {
	e, ok := s.templates[code]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownTemplate, code)
	}
	return e, nil
}

// prepare finds the template, checks the channel and returns only the
// variables the template declares: extra ones are ignored by design.
func (s *Store) prepare(code string, ch Channel, vars map[string]string) (*entry, map[string]string, error) {
	e, err := s.entry(code)
	if err != nil {
		return nil, nil, err
	}
	if !slices.Contains(e.channels, ch) {
		return nil, nil, fmt.Errorf("%w: template %q supports %v, not %q", ErrUnsupportedChannel, code, e.channels, ch)
	}
	data := make(map[string]string, len(e.vars))
	for _, v := range e.vars {
		val, ok := vars[v]
		if !ok || strings.TrimSpace(val) == "" {
			return nil, nil, &MissingVariableError{Template: code, Name: v}
		}
		data[v] = val
	}
	return e, data, nil
}

func renderSubject(e *entry, l *localized, data map[string]string) (string, error) {
	var out bytes.Buffer
	if err := l.subject.Execute(&out, data); err != nil {
		return "", fmt.Errorf("%w: %w", ErrRender, err)
	}
	subject := strings.TrimSpace(out.String())
	if strings.IndexFunc(subject, func(r rune) bool { return unicode.IsControl(r) && r != '\t' }) >= 0 {
		return "", fmt.Errorf("%w (template %q, locale %s)", ErrUnsafeSubject, e.code, l.name)
	}
	return subject, nil
}

// pick chooses a locale: the requested one, then one of the same language
// ("en-US" gets "en", "zh" gets "zh-CN"), then the default locale (or its
// language), then the first the template has.
func (e *entry) pick(locale, def string) *localized {
	for _, want := range []string{locale, def} {
		if want == "" {
			continue
		}
		k := strings.ToLower(want)
		if l, ok := e.locales[k]; ok {
			return l
		}
		lang, _, _ := strings.Cut(k, "-")
		if l, ok := e.locales[lang]; ok {
			return l
		}
		for _, o := range e.order {
			if ol, _, _ := strings.Cut(o, "-"); ol == lang {
				return e.locales[o]
			}
		}
	}
	return e.locales[e.order[0]]
}
