package wecom

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/dispatch/channel"
	"github.com/msgpulse/msgpulse/internal/provider"
	wecomapi "github.com/msgpulse/msgpulse/internal/provider/wecom"
)

// callCounter is a WeCom client that accepts every application message
// and remembers how many users each call had. Only the merge's accounting
// is under test here; wecomtest checks what WeCom checks elsewhere.
type callCounter struct {
	Client
	mu    sync.Mutex
	calls []int
}

func (c *callCounter) SendApp(_ context.Context, _ *wecomapi.App, m provider.WeCom) (provider.WeComReceipt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, len(m.ToUsers))
	return provider.WeComReceipt{Receipt: provider.Receipt{Provider: wecomapi.Name}}, nil
}

// A group that leaves the buffer (full, or sent) stops counting in it at
// once, not when its goroutine gets to run: else, under load, every
// newcomer to a buffer still counted full is sent in a group of one.
func TestMergeBufferCountsOnlyWhatItHolds(t *testing.T) {
	wc := &callCounter{}
	c := &Channel{cfg: Config{Client: wc, SendTimeout: time.Second, MergedSends: prometheus.NewCounter(prometheus.CounterOpts{Name: "merged"}), MergedUsers: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "users"})}, log: zap.NewNop()}
	mg := newMerger(c, time.Hour, 3)
	acct := &account{name: "default", app: &wecomapi.App{Account: wecomapi.Account{Name: "default"}}}
	var wg sync.WaitGroup
	add := func(user string) {
		wg.Add(1)
		mg.add(context.Background(), &job{Task: &channel.Task{}, acct: acct}, provider.WeCom{Format: "text", Content: "same", ToUsers: []string{user}}, func(mergeOutcome) { wg.Done() })
	}
	held := func() int { mg.mu.Lock(); defer mg.mu.Unlock(); return mg.held }
	for i, u := range []string{"a", "b", "c", "d", "e", "f"} {
		add(u)
		require.Equal(t, (i+1)%3, held(), "after %d members: a full buffer is emptied at once", i+1)
	}
	wg.Wait()
	require.ElementsMatch(t, []int{3, 3}, wc.calls, "two full groups, no group of one")
}
