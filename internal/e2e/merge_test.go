package e2e

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/provider/wecom/wecomtest"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/pkg/client"
)

// Issue 37: 500 single WeCom messages with the same content went out in 63
// message/send calls with the defaults, the merge held by the workers.
// Through the real binaries, every setting at its default but
// WECOM_MERGE_WINDOW=200ms: at most 2 calls, each user served once; the
// high ones sent with them are not merged.
func TestSingleWeComMessagesMergeWithTheDefaults(t *testing.T) {
	s := newSystem(t)
	srv := wecomtest.New(t)
	_, c := s.api()
	s.consumer("c1", append(weComEnv(srv), "WECOM_MERGE_WINDOW=200ms")...)
	ctx := testenv.Context(t, 60*time.Second)
	vars := map[string]string{"title": "Maintenance", "content": "tonight at 22:00"}
	const n = 500
	users := make([]string, n)
	ids := make([]string, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	start := time.Now()
	for i := range n {
		users[i] = fmt.Sprintf("m%03d", i)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			res, err := c.SendMessage(ctx, client.SendRequest{MessageType: client.MessageWeCom, TemplateCode: "notice", Recipient: users[i], Variables: vars})
			if err == nil {
				ids[i] = res.TaskID
			}
		}()
	}
	wg.Wait()
	accepted := time.Since(start)
	t.Logf("500 messages accepted in %s", accepted)
	// Codes and urgent notices are never held for a merge.
	high := []string{"h1", "h2", "h3"}
	for _, u := range high {
		_, err := c.SendMessage(ctx, client.SendRequest{MessageType: client.MessageWeCom, TemplateCode: "notice", Recipient: u, Variables: vars, Level: client.LevelHigh})
		require.NoError(t, err)
	}
	for i, id := range ids {
		require.NotEmpty(t, id, "message %d accepted", i)
	}
	testenv.WaitFor(t, 30*time.Second, "every user served", func() bool { return srv.Users() == n+len(high) })
	waitSent(t, c, ids)
	for _, u := range users {
		require.Len(t, srv.ReceivedBy(u), 1, u)
	}
	merged := 0
	for _, call := range srv.Calls() {
		switch {
		case len(call) == 1 && call[0][0] == 'h':
		case call[0][0] == 'm':
			merged++
			for _, u := range call {
				require.NotEqual(t, 'h', u[0], "a high message merged with normal ones")
			}
		default:
			t.Fatalf("a call with %v", call)
		}
	}
	t.Logf("%d message/send calls for the 500 (%d in all)", merged, len(srv.Calls()))
	require.LessOrEqual(t, merged, 2, "the 500 merged into at most 2 calls")
	require.Len(t, srv.Calls(), merged+len(high), "each high message its own call")
}
