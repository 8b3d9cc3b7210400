package mail

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/emersion/go-msgauth/dkim"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/mailcatcher"
	"github.com/msgpulse/msgpulse/internal/provider"
)

const unsubURL = "https://msg.example.com/unsubscribe/eyJ0ZW5hbnQiOiJzaG9wIn0.c2lnbmF0dXJlc2lnbmF0dXJlc2lnbmF0dXJlc2lnbmF0dXJl"

// A mail with an unsubscribe link arrives with both RFC 8058 headers; one
// without (a code, a high notice) with neither; a link that could break
// the header is refused for good before anything is sent.
func TestListUnsubscribeHeaders(t *testing.T) {
	t.Parallel()
	m, srv := setup(t, mailcatcher.DefaultConfig(), nil)
	for _, tc := range []struct {
		name, link string
		want       bool
		refused    bool
	}{
		{name: "a low notice", link: unsubURL, want: true},
		{name: "a code", link: ""},
		{name: "a line break in the link", link: unsubURL + "\r\nBcc: x@example.com", refused: true},
		{name: "a bracket in the link", link: "https://x.example/a>b", refused: true},
		{name: "not a URL", link: "mailto:x@example.com", refused: true},
	} {
		before := srv.Count()
		mm := mail(1)
		mm.ListUnsubscribe = tc.link
		_, err := m.SendMail(ctx(t), mm)
		if tc.refused {
			require.ErrorIs(t, err, provider.ErrPermanent, tc.name)
			require.ErrorIs(t, err, ErrInvalidMail, tc.name)
			require.Equal(t, before, srv.Count(), tc.name)
			continue
		}
		require.NoError(t, err, tc.name)
		got := srv.Messages()[srv.Count()-1]
		if !tc.want {
			require.Empty(t, got.Header("List-Unsubscribe"), tc.name)
			require.Empty(t, got.Header("List-Unsubscribe-Post"), tc.name)
			continue
		}
		require.Equal(t, "<"+unsubURL+">", got.Header("List-Unsubscribe"), tc.name)
		require.Equal(t, "List-Unsubscribe=One-Click", got.Header("List-Unsubscribe-Post"), tc.name)
	}
}

// dkimKey makes a key of kind, writes it as PEM and returns the file and
// the p= of its DNS record.
func dkimKey(t *testing.T, kind string) (file, record string) {
	t.Helper()
	var key crypto.Signer
	var der []byte
	var err error
	switch kind {
	case "rsa":
		key, err = rsa.GenerateKey(rand.Reader, 2048)
		require.NoError(t, err)
	case "ed25519":
		_, key, err = ed25519.GenerateKey(rand.Reader)
		require.NoError(t, err)
	}
	der, err = x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	file = filepath.Join(t.TempDir(), kind+".pem")
	require.NoError(t, os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600))
	switch k := key.Public().(type) {
	case *rsa.PublicKey:
		pub, err := x509.MarshalPKIXPublicKey(k)
		require.NoError(t, err)
		return file, "v=DKIM1; k=rsa; p=" + base64.StdEncoding.EncodeToString(pub)
	case ed25519.PublicKey:
		return file, "v=DKIM1; k=ed25519; p=" + base64.StdEncoding.EncodeToString(k)
	}
	t.Fatalf("unknown key kind %s", kind)
	return "", ""
}

// A signed mail, as the mail catcher received it, verifies against the
// key's DNS record (looked up in the test, not in DNS), and its signature
// covers From, Subject, Date, Message-ID and both unsubscribe headers; a
// byte changed in transit fails it.
func TestDKIMSignatureVerifies(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"rsa", "ed25519"} {
		file, record := dkimKey(t, kind)
		key, err := LoadDKIMKey(file)
		require.NoError(t, err, kind)
		m, srv := setup(t, mailcatcher.DefaultConfig(), func(c *Config) {
			c.DKIM = &DKIM{Domain: "example.com", Selector: "s1", Key: key}
		})
		mm := mail(2)
		mm.ListUnsubscribe = unsubURL
		_, err = m.SendMail(ctx(t), mm)
		require.NoError(t, err, kind)
		raw := srv.Messages()[0].Raw
		lookups := 0
		opts := &dkim.VerifyOptions{LookupTXT: func(domain string) ([]string, error) {
			lookups++
			require.Equal(t, "s1._domainkey.example.com", domain, kind)
			return []string{record}, nil
		}}
		vs, err := dkim.VerifyWithOptions(strings.NewReader(raw), opts)
		require.NoError(t, err, kind)
		require.Len(t, vs, 1, kind)
		require.NoError(t, vs[0].Err, kind)
		require.Equal(t, "example.com", vs[0].Domain, kind)
		require.Positive(t, lookups, kind)
		signed := strings.ToLower(strings.Join(vs[0].HeaderKeys, ":"))
		for _, h := range []string{"from", "subject", "date", "message-id", "list-unsubscribe", "list-unsubscribe-post"} {
			require.Contains(t, strings.Split(signed, ":"), h, kind)
		}

		// A code: no unsubscribe headers, and signed as having none.
		_, err = m.SendMail(ctx(t), mail(3))
		require.NoError(t, err, kind)
		vs, err = dkim.VerifyWithOptions(strings.NewReader(srv.Messages()[1].Raw), opts)
		require.NoError(t, err, kind)
		require.NoError(t, vs[0].Err, kind)
		added := strings.Replace(srv.Messages()[1].Raw, "Subject:", "List-Unsubscribe: <https://evil.example/x>\r\nSubject:", 1)
		vs, err = dkim.VerifyWithOptions(strings.NewReader(added), opts)
		require.NoError(t, err, kind)
		require.Error(t, vs[0].Err, kind+": a List-Unsubscribe added on the way must fail")

		tampered := strings.Replace(raw, "Subject: message 2", "Subject: message 3", 1)
		require.NotEqual(t, raw, tampered)
		vs, err = dkim.VerifyWithOptions(strings.NewReader(tampered), opts)
		require.NoError(t, err, kind)
		require.Error(t, vs[0].Err, kind+": a changed subject must fail")
	}
}

// A key that cannot sign DKIM is refused when it is loaded, so the
// consumer refuses to start rather than send unsigned or unverifiable mail.
func TestLoadDKIMKeyRefuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, b, 0o600))
		return p
	}
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	ecDER, err := x509.MarshalPKCS8PrivateKey(ec)
	require.NoError(t, err)
	pub, _ := dkimKey(t, "ed25519")
	for _, tc := range []struct{ name, path string }{
		{"missing", filepath.Join(dir, "none.pem")},
		{"not PEM", write("text.pem", []byte("not a key"))},
		{"an ECDSA key", write("ec.pem", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: ecDER}))},
		{"a broken key", write("broken.pem", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("garbage")}))},
		{"a directory", dir},
	} {
		_, err := LoadDKIMKey(tc.path)
		require.Error(t, err, tc.name)
	}
	key, err := LoadDKIMKey(pub)
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		dkim DKIM
	}{
		{"no key", DKIM{Domain: "example.com", Selector: "s1"}},
		{"no domain", DKIM{Selector: "s1", Key: key}},
		{"no selector", DKIM{Domain: "example.com", Key: key}},
		{"a domain too long to sign on one line", DKIM{Domain: strings.Repeat("a", 70) + ".com", Selector: "s1", Key: key}},
	} {
		cfg := DefaultConfig()
		cfg.DKIM = &tc.dkim
		require.ErrorContains(t, cfg.Validate(), "DKIM", tc.name)
	}
	// The header list stays on one folded line (see dkimHeaders).
	require.LessOrEqual(t, len("h="+strings.Join(dkimHeaders, ":")+"; "), maxTagLine)
}
