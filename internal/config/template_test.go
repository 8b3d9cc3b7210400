package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/envconf"
)

func TestLoadTemplates(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o644))
	for _, tc := range []struct {
		name   string
		env    map[string]string
		want   Templates
		errVar string
	}{
		{name: "defaults: built-ins, en", env: map[string]string{}, want: Templates{DefaultLocale: "en"}},
		{name: "dir and locale", env: map[string]string{"TEMPLATES_DIR": dir, "DEFAULT_LOCALE": "zh-cn"}, want: Templates{Dir: dir, DefaultLocale: "zh-CN"}},
		{name: "unknown locale", env: map[string]string{"DEFAULT_LOCALE": "fr"}, errVar: "DEFAULT_LOCALE"},
		{name: "missing dir", env: map[string]string{"TEMPLATES_DIR": filepath.Join(dir, "absent")}, errVar: "TEMPLATES_DIR"},
		{name: "dir is a file", env: map[string]string{"TEMPLATES_DIR": file}, errVar: "TEMPLATES_DIR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := envconf.New(envconf.FromMap(tc.env))
			got := loadTemplates(l)
			if tc.errVar != "" {
				require.ErrorContains(t, l.Err(), tc.errVar)
				return
			}
			require.NoError(t, l.Errs())
			require.Equal(t, tc.want, got)
		})
	}
}
