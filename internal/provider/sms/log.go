package sms

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/logging"
	"github.com/msgpulse/msgpulse/internal/provider"
)

// LogLinePrefix starts the line the log provider prints for each message.
const LogLinePrefix = "[sms:log] "

// logSender prints messages instead of sending them, for development. The
// text goes to out (stdout), never to the zap logger: the text of a
// verification SMS is the code, and log pipelines keep what they get.
type logSender struct {
	mu  sync.Mutex // one message per line even with concurrent senders
	out io.Writer
	seq atomic.Uint64
}

func newLogSender(log *zap.Logger, out io.Writer) (*logSender, error) {
	if out == nil {
		return nil, errors.New("sms provider log: needs a writer to print messages to")
	}
	log.Warn("SMS provider \"log\" is for development only: messages are printed to stdout and never sent",
		zap.String("provider", NameLog))
	return &logSender{out: out}, nil
}

func (s *logSender) Name() string { return NameLog }

func (s *logSender) SendSMS(ctx context.Context, m provider.SMS) (provider.Receipt, error) {
	if err := ctx.Err(); err != nil {
		return provider.Receipt{}, &provider.Error{Provider: NameLog, Class: provider.Transient, Code: "canceled", Err: err}
	}
	if !e164(m.To) {
		return provider.Receipt{}, badRecipient(NameLog, m.To)
	}
	id := m.TaskID
	if id == "" {
		id = "log-" + strconv.FormatUint(s.seq.Add(1), 10)
	}
	s.mu.Lock()
	_, err := fmt.Fprintf(s.out, LogLinePrefix+"to=%s task=%s template=%q text=%q\n", logging.Mask(m.To), m.TaskID, m.Template, m.Text)
	s.mu.Unlock()
	if err != nil {
		return provider.Receipt{}, &provider.Error{Provider: NameLog, Class: provider.Transient, Code: "write", Err: err}
	}
	return provider.Receipt{Provider: NameLog, MessageID: id}, nil
}
