package envconf

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/redact"
)

// A bad URL is quoted in the error without its password, however it is
// malformed.
func TestURLErrorsMaskCredentials(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"http://guest:s3cr3tpw@", "http//guest:s3cr3tpw@host", "http:/guest:s3cr3tpw@host",
		"http://guest:s3cr3tpw%@host", "ftp://guest:s3cr3tpw@host", "guest:s3cr3tpw@host:15672", "http://guest:s3#cr3tpw@host"} {
		l := New(FromMap(map[string]string{"RABBITMQ_MANAGEMENT_URL": v}))
		l.URL("RABBITMQ_MANAGEMENT_URL", "", []string{"http", "https"}, "")
		err := l.Err()
		require.Error(t, err, v)
		require.NotContains(t, err.Error(), "s3cr3tpw", v)
		require.NotContains(t, err.Error(), "s3#cr3tpw", v)
		require.True(t, strings.HasPrefix(err.Error(), "RABBITMQ_MANAGEMENT_URL="), err.Error())
	}
}

// A list of URLs (AMQP_URL on a cluster) is masked URL by URL, every host
// kept readable; WithVHost and SplitURLs work item by item.
func TestURLLists(t *testing.T) {
	list := "amqp://u:p1@h1:5672/a, amqp://u:p2@h2:5672/a,amqp://h3:5672/a"
	got := redact.Passwords(list)
	for _, want := range []string{"u:xxxxx@h1:5672", "u:xxxxx@h2:5672", "amqp://h3:5672/a"} {
		if !strings.Contains(got, want) {
			t.Fatalf("Passwords(%q) = %q, want it to contain %q", list, got, want)
		}
	}
	if strings.Contains(got, "p1") || strings.Contains(got, "p2") {
		t.Fatalf("Passwords(%q) = %q shows a password", list, got)
	}
	v, err := WithVHost(list, "vh-1")
	if err != nil {
		t.Fatal(err)
	}
	if urls := SplitURLs(v); len(urls) != 3 || !strings.HasSuffix(urls[1], "@h2:5672/vh-1") {
		t.Fatalf("WithVHost: %q", v)
	}
}

func TestPairs(t *testing.T) {
	for _, tc := range []struct {
		in, wantErr string
		want        []Pair
	}{
		{in: "", want: nil},
		{in: " a = 1 ,, b=2 ", want: []Pair{{Item: "a = 1", Key: "a", Value: "1"}, {Item: "b=2", Key: "b", Value: "2"}}},
		{in: "a", wantErr: `"a": want name=KEY`},
		{in: "a=", wantErr: `"a=": want name=KEY`},
		{in: "=1", wantErr: `"=1": want name=KEY`},
		{in: "a=1,a=2", wantErr: `robot "a" mapped twice`},
	} {
		got, err := Pairs(tc.in, ",", "robot", "name=KEY")
		if tc.wantErr != "" {
			require.EqualError(t, err, tc.wantErr, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
}
