package template

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	htmltemplate "html/template"
	"io/fs"
	"maps"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	texttemplate "text/template"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// Loading: the built-in templates and a TEMPLATES_DIR's, each read from
// its folder (template.yaml, then a folder per locale), checked and
// parsed once, so that rendering never meets a template it cannot use.

const (
	metaFile    = "template.yaml"
	subjectFile = "subject.txt"
	htmlFile    = "body.html"
	textFile    = "body.txt"
	smsFile     = "sms.txt"
	wecomFile   = "wecom.txt"
)

var channelFiles = map[Channel][]string{
	Email: {subjectFile, htmlFile, textFile},
	SMS:   {smsFile},
	WeCom: {wecomFile},
}

//go:embed templates
var builtin embed.FS

var (
	codeRE     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
	localeRE   = regexp.MustCompile(`^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})*$`)
	variableRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

type meta struct {
	Description string    `yaml:"description"`
	Variables   []string  `yaml:"variables"`
	Channels    []Channel `yaml:"channels"`
	// WeComFormat is the msgtype the wecom.txt file is written for:
	// text (default) or markdown.
	WeComFormat string `yaml:"wecomFormat"`
	// Kind "code" marks a template that carries a verification code: it is
	// sent only by POST /api/verification-codes, which generates, limits
	// and checks the code, never as a message whose variables the caller
	// chooses. Empty (the default) is a notification template.
	Kind string `yaml:"kind"`
}

// Load parses the built-in templates and, if dir is not empty, the
// templates in dir; a template in dir replaces the built-in one with the
// same code as a whole (no per-file merging, so an override can never mix
// two versions of one template). defaultLocale is used when a message asks
// for a locale a template does not have.
func Load(dir, defaultLocale string) (*Store, error) {
	if !localeRE.MatchString(defaultLocale) {
		return nil, fmt.Errorf("templates: default locale %q is not a locale such as en or zh-CN", defaultLocale)
	}
	sub, err := fs.Sub(builtin, "templates")
	if err != nil {
		return nil, fmt.Errorf("templates: built-ins: %w", err)
	}
	all, err := loadFS(sub, func(rel string) string { return "built-in templates/" + rel })
	if err != nil {
		return nil, err
	}
	if dir != "" {
		st, err := os.Stat(dir)
		if err != nil {
			return nil, fmt.Errorf("templates: TEMPLATES_DIR: %w", err)
		}
		if !st.IsDir() {
			return nil, fmt.Errorf("templates: TEMPLATES_DIR %s is not a directory", dir)
		}
		custom, err := loadFS(os.DirFS(dir), func(rel string) string { return dir + string(os.PathSeparator) + rel })
		if err != nil {
			return nil, err
		}
		for code, e := range custom {
			all[code] = e
		}
	}
	return &Store{defaultLocale: defaultLocale, templates: all}, nil
}

func loadFS(fsys fs.FS, where func(string) string) (map[string]*entry, error) {
	dirs, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("templates: read %s: %w", where("."), err)
	}
	out := map[string]*entry{}
	for _, d := range dirs {
		// Files at the top (a README) and hidden directories (.git) are not
		// templates; everything else must be one.
		if !d.IsDir() || strings.HasPrefix(d.Name(), ".") {
			continue
		}
		if !codeRE.MatchString(d.Name()) {
			return nil, fmt.Errorf("templates: %s: directory name is not a valid template code (letters, digits, _ . -)", where(d.Name()))
		}
		e, err := loadTemplate(fsys, d.Name(), where)
		if err != nil {
			return nil, err
		}
		out[e.code] = e
	}
	return out, nil
}

func loadTemplate(fsys fs.FS, code string, where func(string) string) (*entry, error) {
	metaPath := code + "/" + metaFile
	raw, err := fs.ReadFile(fsys, metaPath)
	if err != nil {
		return nil, fmt.Errorf("templates: %s: %w", where(metaPath), err)
	}
	var m meta
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("templates: %s: %w", where(metaPath), err)
	}
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("templates: %s: %w", where(metaPath), err)
	}
	e := &entry{code: code, description: m.Description, vars: m.Variables, channels: m.Channels, wecomFormat: m.WeComFormat, kind: m.Kind, locales: map[string]*localized{}}

	items, err := fs.ReadDir(fsys, code)
	if err != nil {
		return nil, fmt.Errorf("templates: %s: %w", where(code), err)
	}
	for _, it := range items {
		name := it.Name()
		switch {
		case name == metaFile || strings.HasPrefix(name, "."):
			continue
		case !it.IsDir():
			return nil, fmt.Errorf("templates: %s: unexpected file (a template holds %s and one directory per locale)", where(code+"/"+name), metaFile)
		case !localeRE.MatchString(name):
			return nil, fmt.Errorf("templates: %s: directory name is not a locale such as en or zh-CN", where(code+"/"+name))
		}
		key := strings.ToLower(name)
		if _, dup := e.locales[key]; dup {
			return nil, fmt.Errorf("templates: %s: locale given twice (names differ only in case)", where(code+"/"+name))
		}
		l, err := loadLocale(fsys, e, name, where)
		if err != nil {
			return nil, err
		}
		e.locales[key] = l
		e.order = append(e.order, key)
	}
	if len(e.locales) == 0 {
		return nil, fmt.Errorf("templates: %s: no locale directory (e.g. %s/en)", where(code), code)
	}
	sort.Strings(e.order)
	return e, nil
}

func (m *meta) validate() error {
	seen := map[string]bool{}
	for _, v := range m.Variables {
		if !variableRE.MatchString(v) {
			return fmt.Errorf("variable %q: use letters, digits and _ (it is written {{.%s}} in the files)", v, v)
		}
		if seen[v] {
			return fmt.Errorf("variable %q listed twice", v)
		}
		seen[v] = true
	}
	if len(m.Channels) == 0 {
		return errors.New("channels: list at least one of email, sms, wecom")
	}
	if m.Kind != "" && m.Kind != KindCode {
		return fmt.Errorf("kind: %q is not code (or absent, for a notification template)", m.Kind)
	}
	switch m.WeComFormat {
	case "":
		m.WeComFormat = FormatText
	case FormatText, FormatMarkdown, FormatTextCard, FormatNews:
	default:
		return fmt.Errorf("wecomFormat: %q is not text, markdown, textcard or news", m.WeComFormat)
	}
	seenCh := map[Channel]bool{}
	for _, c := range m.Channels {
		if _, ok := channelFiles[c]; !ok {
			return fmt.Errorf("channels: %q is not email, sms or wecom", c)
		}
		if seenCh[c] {
			return fmt.Errorf("channels: %q listed twice", c)
		}
		seenCh[c] = true
	}
	return nil
}

func loadLocale(fsys fs.FS, e *entry, locale string, where func(string) string) (*localized, error) {
	dir := e.code + "/" + locale
	want := map[string]bool{}
	for _, c := range e.channels {
		for _, f := range channelFiles[c] {
			want[f] = true
		}
	}
	files, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("templates: %s: %w", where(dir), err)
	}
	for _, f := range files {
		if strings.HasPrefix(f.Name(), ".") {
			continue
		}
		// A stray or misspelled file would otherwise be silently unused.
		if !want[f.Name()] {
			return nil, fmt.Errorf("templates: %s: unexpected file; for channels %v a locale holds %s", where(dir+"/"+f.Name()), e.channels, strings.Join(slices.Sorted(maps.Keys(want)), ", "))
		}
	}
	sample := make(map[string]string, len(e.vars))
	for _, v := range e.vars {
		sample[v] = "x"
	}
	l := &localized{name: locale}
	for _, f := range slices.Sorted(maps.Keys(want)) {
		rel := dir + "/" + f
		src, err := fs.ReadFile(fsys, rel)
		if err != nil {
			return nil, fmt.Errorf("templates: %s: %w", where(rel), err)
		}
		if !utf8.Valid(src) {
			return nil, fmt.Errorf("templates: %s: not UTF-8", where(rel))
		}
		name := where(rel)
		var out bytes.Buffer
		if f == htmlFile {
			t, err := htmltemplate.New(name).Option("missingkey=error").Parse(string(src))
			if err != nil {
				return nil, fmt.Errorf("templates: %w", err)
			}
			// The trial run also makes html/template decide its escaping
			// contexts now; an ambiguous context is a Load error, not a
			// failure of the first real message.
			if err := t.Execute(&out, sample); err != nil {
				return nil, fmt.Errorf("templates: %s: uses a variable not listed in %s, or cannot run: %w", name, metaFile, err)
			}
			l.html = t
		} else {
			t, err := texttemplate.New(name).Option("missingkey=error").Parse(string(src))
			if err != nil {
				return nil, fmt.Errorf("templates: %w", err)
			}
			if err := t.Execute(&out, sample); err != nil {
				return nil, fmt.Errorf("templates: %s: uses a variable not listed in %s, or cannot run: %w", name, metaFile, err)
			}
			switch f {
			case subjectFile:
				l.subject = t
			case textFile:
				l.text = t
			case smsFile:
				l.sms = t
			case wecomFile:
				l.wecom = t
			}
		}
		if strings.TrimSpace(out.String()) == "" {
			return nil, fmt.Errorf("templates: %s: renders to nothing", name)
		}
	}
	return l, nil
}
