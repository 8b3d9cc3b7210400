package mail

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	gomail "github.com/wneessen/go-mail"
	gosmtp "github.com/wneessen/go-mail/smtp"
)

// The SMTP exchange of one message on a connection of the pool: MAIL
// FROM, RCPT TO and DATA (pipelined where the server offers it), or BDAT
// chunks, each step bounded by the send's context, and what a failure
// says about the connection.

// SMTP stages, for error messages and for deciding what a failure means.
const (
	stageWait    = "waiting for a connection"
	stageConnect = "connect"
	stageMail    = "MAIL FROM"
	stageRcpt    = "RCPT TO"
	stageData    = "DATA"
	stageReset   = "RSET"
)

type stageError struct {
	stage string
	err   error
}

func (e *stageError) Error() string { return e.stage + ": " + e.err.Error() }
func (e *stageError) Unwrap() error { return e.err }

// step runs one SMTP command with its own deadline.
func (m *Mailer) step(ctx context.Context, c *conn, stage string, f func() error) error {
	if err := c.nc.SetDeadline(time.Now().Add(m.cfg.Timeout)); err != nil {
		return &stageError{stage, err}
	}
	// Checked after the deadline was extended: a cancellation from now on
	// moves the deadline back into the past; an earlier one shows here.
	if err := ctx.Err(); err != nil {
		return &stageError{stage, err}
	}
	if err := f(); err != nil {
		return &stageError{stage, err}
	}
	return nil
}

// deliver runs one mail transaction on c. keep says whether c is in a
// known, clean state and may be reused.
func (m *Mailer) deliver(ctx context.Context, c *conn, msg *gomail.Msg, from, rcpt string) (resp string, keep bool, err error) {
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(time.Unix(1, 0)) })
	defer func() {
		if !stop() {
			keep = false // the abort spoiled the socket's deadline
		}
	}()
	if m.cfg.Pipelining && m.cfg.Chunking && c.pipelining && c.chunking {
		return m.deliverChunked(ctx, c, msg, from, rcpt)
	}
	var w io.WriteCloser
	if m.cfg.Pipelining && c.pipelining {
		w, keep, err = m.openPipelined(ctx, c, from, rcpt)
	} else {
		w, keep, err = m.open(ctx, c, from, rcpt)
	}
	if err != nil {
		return "", keep, err
	}
	if err := m.step(ctx, c, stageData, func() error { _, err := msg.WriteTo(w); return err }); err != nil {
		return "", false, err // cut off mid-message: nothing about the session is known
	}
	if err := m.step(ctx, c, stageData, w.Close); err != nil {
		return "", m.recover(ctx, c, err), err
	}
	if r, ok := w.(interface{ ServerResponse() string }); ok {
		resp = r.ServerResponse()
	}
	// No RSET after it: the reply to the final dot completes the
	// transaction and clears the session's state (RFC 5321 §4.1.1.4), so the
	// next MAIL FROM starts afresh. An RSET here would cost every message
	// a round trip.
	return resp, true, nil
}

// open starts a transaction one command at a time: MAIL FROM, RCPT TO,
// DATA, each waiting for its reply.
func (m *Mailer) open(ctx context.Context, c *conn, from, rcpt string) (io.WriteCloser, bool, error) {
	if err := m.step(ctx, c, stageMail, func() error { return c.sc.Mail(from) }); err != nil {
		return nil, m.recover(ctx, c, err), err
	}
	if err := m.step(ctx, c, stageRcpt, func() error { return c.sc.Rcpt(rcpt) }); err != nil {
		return nil, m.recover(ctx, c, err), err
	}
	var w io.WriteCloser
	if err := m.step(ctx, c, stageData, func() (err error) { w, err = c.sc.Data(); return err }); err != nil {
		return nil, m.recover(ctx, c, err), err
	}
	return w, true, nil
}

// deliverChunked runs a whole transaction in one write (RFC 3030 with RFC
// 2920): MAIL FROM, RCPT TO and "BDAT <size> LAST" followed by the message,
// then the three replies in order. DATA must wait for its 354 before the
// message goes; BDAT carries its size instead, so nothing waits, and the
// message costs one round trip instead of two. The message is rendered
// before anything is sent, so a message that cannot be rendered leaves
// the connection untouched.
//
// Refusals are read as in openPipelined. A server that refused MAIL FROM
// or RCPT TO still reads the chunk and refuses BDAT (RFC 3030 §3), so the
// session stays in step; the reply to BDAT LAST ends the transaction
// either way, and the connection is kept if it then accepts RSET. The
// reply to BDAT LAST is the server's acceptance, as the reply to the final
// dot is.
func (m *Mailer) deliverChunked(ctx context.Context, c *conn, msg *gomail.Msg, from, rcpt string) (string, bool, error) {
	if err := addressBreak(from, rcpt); err != nil {
		return "", true, err
	}
	var body bytes.Buffer
	if _, err := msg.WriteTo(&body); err != nil {
		return "", true, &stageError{stage: stageData, err: err}
	}
	// BDAT sends the bytes as they are; DATA's dot writer would have made
	// a bare line feed a line end, so this does too.
	data := crlf(body.Bytes())
	res := m.pipeline(ctx, c, []command{
		{stageMail, "MAIL FROM:" + from + c.mailParams, 250},
		{stageRcpt, "RCPT TO:" + rcpt, 25},
		{stageData, "BDAT " + strconv.Itoa(len(data)) + " LAST", 250},
	}, data)
	switch {
	case res.lost:
		return "", false, res.refused
	case res.refused != nil:
		return "", m.recover(ctx, c, res.refused), res.refused
	}
	return res.last, true, nil
}

// crlf returns b with every line feed not after a carriage return made
// CRLF, as textproto's dot writer does for DATA; b itself when it has none
// (go-mail writes CRLF).
func crlf(b []byte) []byte {
	bare := 0
	for i, c := range b {
		if c == '\n' && (i == 0 || b[i-1] != '\r') {
			bare++
		}
	}
	if bare == 0 {
		return b
	}
	out := make([]byte, 0, len(b)+bare)
	for i, c := range b {
		if c == '\n' && (i == 0 || b[i-1] != '\r') {
			out = append(out, '\r')
		}
		out = append(out, c)
	}
	return out
}

// openPipelined starts a transaction as RFC 2920 allows: MAIL FROM, RCPT
// TO and DATA in one write, then their three replies in order (pipeline).
func (m *Mailer) openPipelined(ctx context.Context, c *conn, from, rcpt string) (io.WriteCloser, bool, error) {
	if err := addressBreak(from, rcpt); err != nil {
		return nil, true, err
	}
	res := m.pipeline(ctx, c, []command{
		{stageMail, "MAIL FROM:" + from + c.mailParams, 250},
		{stageRcpt, "RCPT TO:" + rcpt, 25},
		{stageData, "DATA", 354},
	}, nil)
	switch {
	case res.lost:
		return nil, false, res.refused
	case res.refused == nil:
	case res.lastOK:
		// A server that refused MAIL or RCPT must refuse DATA too (RFC
		// 2920); one that answered 354 anyway waits for a message, and
		// only dropping the connection ends that without sending one.
		return nil, false, res.refused
	default:
		return nil, m.recover(ctx, c, res.refused), res.refused
	}
	return &dataWriter{c: c, w: c.sc.Text.DotWriter()}, true, nil
}

// addressBreak refuses an address with a line break, which would end its
// command early in a pipelined write. go-mail's Mail and Rcpt refuse these
// too; build never lets one through.
func addressBreak(from, rcpt string) error {
	if strings.ContainsAny(from+rcpt, "\r\n") {
		return &stageError{stage: stageMail, err: errors.New("smtp: a line break in an address")}
	}
	return nil
}

// command is one pipelined SMTP command and the reply it expects.
type command struct {
	stage, line string
	code        int // as go-mail expects them: 25 is any 25x
}

// pipelined is what the replies to a pipelined write said.
type pipelined struct {
	// refused is the first refusal, at its command's stage, as if the
	// commands had gone one by one; when lost, the connection's failure,
	// or a refusal read before it (still the server's word on the
	// message).
	refused error
	lost    bool   // the connection failed: drop it
	lastOK  bool   // the last command was accepted
	last    string // the last reply's text
}

// pipeline writes cmds, then tail, in one write, and reads every reply in
// order whatever the one before said, so the session stays in step.
func (m *Mailer) pipeline(ctx context.Context, c *conn, cmds []command, tail []byte) pipelined {
	if err := m.step(ctx, c, stageMail, func() error {
		for _, cmd := range cmds {
			_, _ = c.sc.Text.W.WriteString(cmd.line)
			_, _ = c.sc.Text.W.WriteString("\r\n")
		}
		_, _ = c.sc.Text.W.Write(tail)
		return c.sc.Text.W.Flush()
	}); err != nil {
		return pipelined{refused: err, lost: true} // cut off mid-write: nothing about the session is known
	}
	var res pipelined
	for _, cmd := range cmds {
		var msg string
		err := m.step(ctx, c, cmd.stage, func() (err error) { _, msg, err = c.sc.Text.ReadResponse(cmd.code); return err })
		res.lastOK, res.last = err == nil, msg
		var te *textproto.Error
		switch {
		case err == nil:
		case !errors.As(err, &te):
			if res.refused == nil {
				res.refused = err
			}
			res.lost = true
			return res
		case res.refused == nil:
			res.refused = err
		}
	}
	return res
}

// mailParams are the MAIL FROM parameters go-mail's Client.Mail adds for
// the server's extensions (see conn.mailParams).
func mailParams(sc *gosmtp.Client) string {
	var p string
	if ok, _ := sc.Extension("8BITMIME"); ok {
		p += " BODY=8BITMIME"
	}
	if ok, _ := sc.Extension("SMTPUTF8"); ok {
		p += " SMTPUTF8"
	}
	return p
}

// dataWriter is the message body of a pipelined transaction: a dot-stuffing
// writer whose Close sends the final dot and reads the reply, as go-mail's
// DataCloser does for Client.Data.
type dataWriter struct {
	c    *conn
	w    io.WriteCloser
	resp string
}

func (d *dataWriter) Write(p []byte) (int, error) { return d.w.Write(p) }

func (d *dataWriter) Close() error {
	if err := d.w.Close(); err != nil {
		return err
	}
	_, resp, err := d.c.sc.Text.ReadResponse(250)
	d.resp = resp
	return err
}

// ServerResponse is the reply to the final dot, once Close returned.
func (d *dataWriter) ServerResponse() string { return d.resp }

// recover returns whether c may be reused after err: only when the server
// answered (the session is in step), did not announce it is closing (421),
// and accepts RSET.
func (m *Mailer) recover(ctx context.Context, c *conn, err error) bool {
	var te *textproto.Error
	if !errors.As(err, &te) || te.Code == 421 {
		return false
	}
	return m.step(ctx, c, stageReset, c.sc.Reset) == nil
}

// isStale: the failure is what a connection the server closed while idle
// looks like on its first command.
func isStale(err error) bool {
	var se *stageError
	if !errors.As(err, &se) || se.stage != stageMail {
		return false
	}
	var te *textproto.Error
	if errors.As(err, &te) {
		return te.Code == 421
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false // a hung server: redialling would double the wait
	}
	return true
}
