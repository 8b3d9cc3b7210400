package config

import (
	"os"

	"github.com/msgpulse/msgpulse/internal/envconf"
)

// Templates says where message templates come from.
type Templates struct {
	Dir           string // empty: built-in templates only
	DefaultLocale string
}

// loadTemplates reads the template settings (cmd/api validates against the
// templates, cmd/consumer renders them; both must load the same ones).
func loadTemplates(l *envconf.Loader) Templates {
	t := Templates{
		Dir: l.String("TEMPLATES_DIR", "", "directory of templates (<code>/template.yaml, <code>/<locale>/...) that add to or replace the built-in ones by code; empty: built-ins only"),
		DefaultLocale: l.Enum("DEFAULT_LOCALE", "en", []string{"zh-CN", "en"},
			"locale used when a message asks for one its template does not have"),
	}
	// Only a look at the directory, so the error names the variable; the
	// templates themselves are parsed by template.Load.
	if t.Dir != "" {
		if st, err := os.Stat(t.Dir); err != nil {
			l.Fail("TEMPLATES_DIR", t.Dir, "%v", err)
		} else if !st.IsDir() {
			l.Fail("TEMPLATES_DIR", t.Dir, "not a directory")
		}
	}
	return t
}
