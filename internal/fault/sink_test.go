package fault

import (
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/mailcatcher"
	"github.com/msgpulse/msgpulse/internal/provider/mail"
)

// sink is the SMTP server standing in for every recipient's inbox. It
// counts what it accepted by taskId (the mailer's X-Msgpulse-Task-Id) and by
// recipient (unique per request, which is how a mail from a request that
// was answered 503 is recognised).
type sink struct {
	srv *mailcatcher.Server

	mu     sync.Mutex
	byTask map[string]int
	rcptOf map[string]string // taskId → recipient
	text   map[string]string // recipient → the text of the last mail to it
	total  int
	// after, if set, runs for each accepted message before the client gets
	// its 250: it may block, to hold a sender inside the window between the
	// provider's yes and the sent mark.
	after atomic.Pointer[func(taskID, rcpt string)]
}

func newSink(t *testing.T) *sink {
	t.Helper()
	k := &sink{byTask: map[string]int{}, rcptOf: map[string]string{}, text: map[string]string{}}
	srv, err := mailcatcher.New(mailcatcher.Config{SMTPAddr: "127.0.0.1:0", Max: 100, Timeout: 30 * time.Second, OnMessage: k.onMessage})
	require.NoError(t, err)
	k.srv = srv
	t.Cleanup(func() { _ = srv.Close() })
	return k
}

func (k *sink) addr() string { return k.srv.Addr() }

func (k *sink) onMessage(m mailcatcher.Message) {
	id := m.Header(mail.TaskHeader)
	rcpt := ""
	if len(m.To) > 0 {
		rcpt = m.To[0]
	}
	k.mu.Lock()
	k.byTask[id]++
	k.rcptOf[id] = rcpt
	k.text[rcpt] = m.Text
	k.total++
	k.mu.Unlock()
	if f := k.after.Load(); f != nil {
		(*f)(id, rcpt)
	}
}

// textTo is the text of the last mail to rcpt ("" if none came).
func (k *sink) textTo(rcpt string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.text[rcpt]
}

// setHook decides every RCPT and DATA (nil: accept everything).
func (k *sink) setHook(f func(mailcatcher.Envelope) error) { k.srv.SetHook(f) }

// setAfter installs (or, with nil, removes) the after-accept callback.
func (k *sink) setAfter(f func(taskID, rcpt string)) {
	if f == nil {
		k.after.Store(nil)
		return
	}
	k.after.Store(&f)
}

// count is how many messages the sink accepted.
func (k *sink) count() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.total
}

// snapshot returns copies of the per-task counts and recipients.
func (k *sink) snapshot() (byTask map[string]int, rcptOf map[string]string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return maps.Clone(k.byTask), maps.Clone(k.rcptOf)
}

// gate holds sends inside the SMTP server (at DATA, after the message was
// read and before it is accepted) until it is opened.
type gate struct {
	open   chan struct{}
	once   sync.Once
	held   atomic.Int64
	result error // what the held sends are answered; set before open closes
	filter func(mailcatcher.Envelope) bool
}

// newGate returns a gate for the messages filter selects (nil: all).
func newGate(filter func(mailcatcher.Envelope) bool) *gate {
	return &gate{open: make(chan struct{}), filter: filter}
}

func (g *gate) hook(e mailcatcher.Envelope) error {
	if e.Stage != mailcatcher.StageData || (g.filter != nil && !g.filter(e)) {
		return nil
	}
	g.held.Add(1)
	<-g.open
	return g.result
}

// release lets the held sends go on, answered with result (nil: accepted).
func (g *gate) release(result error) {
	g.once.Do(func() {
		g.result = result
		close(g.open)
	})
}
