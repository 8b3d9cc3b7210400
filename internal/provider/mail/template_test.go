package mail

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/mailcatcher"
	"github.com/msgpulse/msgpulse/internal/provider"
	"github.com/msgpulse/msgpulse/internal/template"
)

// The path the consumer takes: a built-in template, rendered, sent, read
// back from the catcher intact (non-ASCII subject, both parts).
func TestSendsRenderedBuiltinTemplates(t *testing.T) {
	t.Parallel()
	store, err := template.Load("", "en")
	require.NoError(t, err)
	for _, tc := range []struct {
		code, locale string
		vars         map[string]string
	}{
		{"verify_code", "zh-CN", map[string]string{"code": "482913", "ttlMinutes": "5"}},
		{"verify_code", "en", map[string]string{"code": "482913", "ttlMinutes": "5"}},
		{"notice", "en", map[string]string{"title": "Maintenance <tonight>", "content": "Back at 10:00.\nThanks."}},
	} {
		t.Run(tc.code+"/"+tc.locale, func(t *testing.T) {
			t.Parallel()
			e, err := store.RenderEmail(tc.code, tc.locale, tc.vars)
			require.NoError(t, err)
			m, srv := setup(t, mailcatcher.Config{}, nil)
			_, err = m.SendMail(ctx(t), provider.Mail{To: "alice@example.com", Subject: e.Subject, HTML: e.HTML, Text: e.Text, TaskID: "t-1"})
			require.NoError(t, err)
			got := srv.Messages()[0]
			require.Equal(t, e.Subject, got.Subject)
			require.Equal(t, e.Text, got.Text)
			require.Equal(t, e.HTML, got.HTML)
		})
	}
}
