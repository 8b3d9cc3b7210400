package dlq

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"
)

// PurgeReport is purge's result (its --json document).
type PurgeReport struct {
	Queue    string   `json:"queue"`
	Selected int      `json:"selected"`
	Deleted  int      `json:"deleted"`
	Export   string   `json:"export,omitempty"`
	IDs      []string `json:"ids"` // of the deleted messages
	Read     int      `json:"read"`
	Depth    int      `json:"depth"`
}

// ExportLine is one message in an export file (JSON lines): enough to
// inspect it, and to publish it again byte for byte (bodyBase64,
// properties, headers).
type ExportLine struct {
	Queue        string          `json:"queue"`
	ExportedAt   time.Time       `json:"exportedAt"`
	ID           string          `json:"id"`
	Reason       string          `json:"reason"`
	BrokerReason string          `json:"brokerReason"`
	Properties   properties      `json:"properties"`
	Headers      map[string]any  `json:"headers"`
	BodyBase64   string          `json:"bodyBase64"`
	Body         json.RawMessage `json:"body,omitempty"` // when the body is JSON
}

// maxLoggedIDs bounds the ids in purge's audit log line.
const maxLoggedIDs = 1000

// Count says how many messages in queue o selects (at most o.Limit), and
// the queue's depth. It reads the queue's log, not the queue (see
// readLog), so it spends no delivery attempt.
func (t *Tool) Count(ctx context.Context, queue string, o Options) (n, depth int, err error) {
	sel := t.selector(o)
	v, err := t.readMatching(ctx, queue, sel, nil, func(inspected, *amqp.Delivery) error {
		n++
		if o.Limit > 0 && n >= o.Limit {
			return errStop
		}
		return nil
	})
	return n, v.Depth, err
}

// Export writes the messages o selects to w as export lines (JSON lines,
// the format of purge --export), reading the queue's log: it deletes
// nothing and spends no delivery attempt. The console offers it as a
// download before a purge.
func (t *Tool) Export(ctx context.Context, queue string, o Options, w io.Writer) (int, error) {
	sel := t.selector(o)
	now := t.now().UTC()
	n := 0
	_, err := t.readMatching(ctx, queue, sel, nil, func(in inspected, del *amqp.Delivery) error {
		if err := writeExport(w, queue, now, in, del); err != nil {
			return err
		}
		n++
		if o.Limit > 0 && n >= o.Limit {
			return errStop
		}
		return nil
	})
	return n, err
}

// Purge deletes the messages o selects. All acks wait until every selected
// message was read (and, with an export file, written and fsynced): an
// interrupted or failed purge deletes nothing. export, if not "", names a
// new file to write them to first.
func (t *Tool) Purge(ctx context.Context, queue string, o Options, export string) (*PurgeReport, error) {
	sel := t.selector(o)
	rep := &PurgeReport{Queue: queue, Export: export, IDs: []string{}}
	passer, closePass, err := t.passer(ctx, queue, nil)
	if err != nil {
		return nil, fmt.Errorf("%w; nothing was deleted", err)
	}
	defer closePass()
	var (
		file   *os.File
		buf    *bufio.Writer
		out    io.Writer
		closed bool
	)
	if export != "" {
		f, err := os.OpenFile(export, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600) //nolint:gosec // the operator names the file; recipients inside: owner only
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("export file %s already exists: refusing to overwrite it (choose a new name); nothing was deleted", export)
		}
		if err != nil {
			return nil, fmt.Errorf("export file: %w; nothing was deleted", err)
		}
		file, buf = f, bufio.NewWriter(f)
		out = buf
		if t.wrapExport != nil {
			out = t.wrapExport(buf)
		}
		defer func() {
			if !closed {
				_ = file.Close()
			}
		}()
	}
	var pending []uint64 // selected, acked only in done
	now := t.now().UTC()
	acked := 0
	done := func(r *reader) error {
		if file != nil {
			if err := finishExport(file, buf); err != nil {
				closed = true
				return fmt.Errorf("export file %s: %w", export, err)
			}
			closed = true
		}
		for _, tag := range pending {
			if err := r.ack(tag); err != nil {
				return err
			}
			acked++
		}
		return nil
	}
	r, err := scan(ctx, t.conn, queue, t.cfg.ScanMax, done, func(r *reader, del *amqp.Delivery) (bool, error) {
		in := t.x.inspect(ctx, queue, del)
		if !sel.match(&in.Entry, taskID(in)) {
			return false, passer(r, del)
		}
		if out != nil {
			if err := writeExport(out, queue, now, in, del); err != nil {
				return true, fmt.Errorf("export file %s: %w", export, err)
			}
		}
		pending = append(pending, del.DeliveryTag)
		rep.IDs = append(rep.IDs, in.ID)
		rep.Selected++
		return o.Limit > 0 && rep.Selected >= o.Limit, nil
	})
	if r != nil {
		rep.Read, rep.Depth = r.read(), r.depth
	}
	// What was acked is gone from the DLQ but not from its log: record it
	// so that list, show and stats leave it out.
	t.forget(ctx, queue, r)
	rep.Deleted = acked
	rep.IDs = rep.IDs[:acked] // acks go in read order
	if file != nil && acked == 0 {
		// Nothing was deleted, so the file records nothing that happened:
		// remove it so it is not mistaken for a backup (a half-written one
		// least of all). Re-running may then use the same name.
		_ = os.Remove(export)
		rep.Export = ""
	}
	if err != nil {
		if acked == 0 {
			return rep, fmt.Errorf("%w; nothing was deleted", err)
		}
		return rep, fmt.Errorf("%w; %d of %d deleted, the rest are still in %s (and in the export file)", err, acked, rep.Selected, queue)
	}
	logged := rep.IDs
	if len(logged) > maxLoggedIDs { // the export file, if any, has them all
		logged = logged[:maxLoggedIDs]
	}
	// Warn, like a revealed code: an audit line of a deletion that must
	// reach stderr even though the tool is otherwise quiet without -v.
	t.log.Warn("purged", zap.String("queue", queue), zap.Int("deleted", acked), zap.String("export", rep.Export),
		t.who, zap.Strings("task_ids", logged), zap.Bool("task_ids_truncated", len(logged) < len(rep.IDs)))
	return rep, nil
}

// purge deletes the selected messages; without --yes it only counts.
func (c *cli) purge(ctx context.Context, t *Tool, queue string, o opts) (int, error) {
	if !o.yes {
		n, depth, err := t.Count(ctx, queue, o.Options)
		if err != nil {
			return ExitError, err
		}
		fmt.Fprintf(c.stderr, "dlq purge: refusing without --yes: it would delete %d message(s) from %s (which holds %d); nothing was deleted.\n"+
			"Add --yes to delete them, with --export FILE to keep a copy.\n", n, queue, depth)
		return ExitUsage, nil
	}
	rep, err := t.Purge(ctx, queue, o.Options, o.export)
	if err != nil {
		return ExitError, err
	}
	seen := map[string]bool{}
	for _, id := range rep.IDs {
		seen[id] = true
	}
	notFound := missing(o.IDs, seen)
	if o.json {
		return ExitOK, writeJSON(c.stdout, rep)
	}
	switch {
	case rep.Selected == 0:
		fmt.Fprintf(c.stdout, "nothing to purge in %s (read %d of %d)\n", queue, rep.Read, rep.Depth)
	case rep.Export != "":
		fmt.Fprintf(c.stdout, "deleted %d message(s) from %s after writing them to %s; read %d of %d\n", rep.Deleted, queue, rep.Export, rep.Read, rep.Depth)
	default:
		fmt.Fprintf(c.stdout, "deleted %d message(s) from %s; read %d of %d\n", rep.Deleted, queue, rep.Read, rep.Depth)
	}
	if len(notFound) > 0 && (o.Limit == 0 || rep.Selected < o.Limit) {
		return ExitError, fmt.Errorf("not found in %s: %s", queue, strings.Join(notFound, ", "))
	}
	return ExitOK, nil
}

func writeExport(w io.Writer, queue string, now time.Time, in inspected, d *amqp.Delivery) error {
	h, _ := jsonValue(d.Headers).(map[string]any)
	line := ExportLine{
		Queue: queue, ExportedAt: now, ID: in.ID, Reason: in.Reason, BrokerReason: in.BrokerReason,
		Properties: propertiesOf(d), Headers: h, BodyBase64: base64.StdEncoding.EncodeToString(d.Body),
	}
	if json.Valid(d.Body) {
		line.Body = d.Body // the encoder compacts it onto one line
	}
	b, err := json.Marshal(line)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// finishExport makes the file durable before anything is deleted: flush,
// fsync, close, and fsync the directory so the file's name survives a
// crash too.
func finishExport(f *os.File, buf *bufio.Writer) error {
	if err := buf.Flush(); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("fsync: %w", err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	dir, err := os.Open(filepath.Dir(f.Name()))
	if err != nil {
		return fmt.Errorf("open its directory to fsync it: %w", err)
	}
	defer func() { _ = dir.Close() }()
	if err := dir.Sync(); err != nil {
		return fmt.Errorf("fsync its directory: %w", err)
	}
	return nil
}
