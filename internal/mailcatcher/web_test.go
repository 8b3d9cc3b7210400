package mailcatcher

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func get(t *testing.T, h http.Handler, method, path string) (int, http.Header, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	body, err := io.ReadAll(rec.Result().Body)
	require.NoError(t, err)
	return rec.Code, rec.Result().Header, string(body)
}

func TestHandler(t *testing.T) {
	t.Parallel()
	s := setup(t, Config{})
	hostile := crlf(`From: x@y
Subject: <script>alert("subject")</script>
MIME-Version: 1.0
Content-Type: multipart/alternative; boundary=b

--b
Content-Type: text/plain

</pre><script>alert("text")</script>
--b
Content-Type: text/html

<p onclick="x()">Hi "there"</p><script>alert('html')</script>
--b--
`)
	require.NoError(t, send(t, s.Addr(), nil, "a@x", []string{"first@y"}, crlf("Subject: first\n\nx\n")))
	require.NoError(t, send(t, s.Addr(), nil, "a@x", []string{`"<evil>"@y`}, hostile))
	h := s.Handler()

	for _, tc := range []struct {
		name, method, path string
		code               int
		contentType        string
		contains           []string
		notContains        []string
	}{
		{
			name: "index lists newest first, escaped", method: "GET", path: "/", code: 200, contentType: "text/html",
			contains: []string{
				`href="/messages/2">&lt;script&gt;alert(&#34;subject&#34;)&lt;/script&gt;</a>`,
				`href="/messages/1">first</a>`,
				"&lt;evil&gt;@y",
			},
			notContains: []string{"<script>", "<evil>"},
		},
		{
			name: "message page escapes everything and sandboxes the HTML", method: "GET", path: "/messages/2", code: 200, contentType: "text/html",
			contains: []string{
				`<iframe sandbox="" referrerpolicy="no-referrer" srcdoc="&lt;p onclick=&#34;x()&#34;&gt;Hi &#34;there&#34;&lt;/p&gt;&lt;script&gt;alert(&#39;html&#39;)&lt;/script&gt;`,
				`<pre>&lt;/pre&gt;&lt;script&gt;alert(&#34;text&#34;)&lt;/script&gt;`,
				"<th>Subject</th><td>&lt;script&gt;",
			},
			notContains: []string{"<script>", "<p onclick"},
		},
		{name: "raw", method: "GET", path: "/messages/1/raw", code: 200, contentType: "text/plain", contains: []string{"Subject: first"}},
		{name: "unknown message", method: "GET", path: "/messages/99", code: 404},
		{name: "bad id", method: "GET", path: "/messages/abc", code: 400},
		{name: "api unknown message", method: "GET", path: "/api/messages/99", code: 404},
		{name: "api one", method: "GET", path: "/api/messages/1", code: 200, contentType: "application/json", contains: []string{`"subject": "first"`}},
		{name: "no other paths", method: "GET", path: "/admin", code: 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, hdr, body := get(t, h, tc.method, tc.path)
			require.Equal(t, tc.code, code, body)
			require.Contains(t, hdr.Get("Content-Security-Policy"), "default-src 'none'")
			require.Equal(t, "nosniff", hdr.Get("X-Content-Type-Options"))
			if tc.contentType != "" {
				require.True(t, strings.HasPrefix(hdr.Get("Content-Type"), tc.contentType), hdr.Get("Content-Type"))
			}
			for _, c := range tc.contains {
				require.Contains(t, body, c)
			}
			for _, c := range tc.notContains {
				require.NotContains(t, body, c)
			}
		})
	}
}

func TestAPIListAndDelete(t *testing.T) {
	t.Parallel()
	s := setup(t, Config{})
	for _, subj := range []string{"one", "two"} {
		require.NoError(t, send(t, s.Addr(), nil, "a@x", []string{"b@y"}, crlf("Subject: "+subj+"\n\n"+subj+" body\n")))
	}
	h := s.Handler()
	code, _, body := get(t, h, "GET", "/api/messages")
	require.Equal(t, 200, code)
	var msgs []Message
	require.NoError(t, json.Unmarshal([]byte(body), &msgs))
	require.Len(t, msgs, 2)
	require.Equal(t, []string{"two", "one"}, []string{msgs[0].Subject, msgs[1].Subject}, "newest first")
	require.Equal(t, "two body\n", msgs[0].Text)
	require.Equal(t, []string{"b@y"}, msgs[0].To)
	require.Contains(t, msgs[0].Raw, "Subject: two")

	code, _, _ = get(t, h, "DELETE", "/api/messages")
	require.Equal(t, http.StatusNoContent, code)
	require.Equal(t, 0, s.Count())
	_, _, body = get(t, h, "GET", "/api/messages")
	require.JSONEq(t, "[]", body)
}
