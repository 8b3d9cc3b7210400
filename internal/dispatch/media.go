package dispatch

import (
	"context"
	"fmt"
	"sync"

	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/provider"
)

// wecomMedia fetches a media message's file (through the egress guard,
// within WeCom's limits) and sets m's media_id: the one cached for the
// same bytes in a's corp, else a fresh upload, then cached.
func (d *Dispatcher) wecomMedia(ctx, sctx context.Context, a *account, md *envelope.Media, m *provider.WeCom) error {
	if d.cfg.Media == nil || a.app == nil {
		return fmt.Errorf("%w: this consumer cannot send WeCom media", ErrTemplate)
	}
	f, err := d.cfg.Media.Fetch(sctx, md.URL, md.Type)
	if err != nil {
		return err
	}
	corp := a.app.CorpID
	// The same file for many users at once (single messages about to be
	// merged) is uploaded by one of them; the others wait for its id.
	id, err := d.uploads.do(corp+"\x00"+md.Type+"\x00"+f.SHA256, func() (string, error) {
		id, err := d.cfg.Media.Cached(ctx, corp, md.Type, f.SHA256)
		if err != nil {
			return "", fmt.Errorf("%w: %w", errRedis, err)
		}
		if id != "" {
			return id, nil
		}
		if id, err = d.cfg.WeCom.UploadMedia(sctx, a.app, md.Type, md.Filename, f.Data); err != nil {
			return "", err
		}
		if err := d.cfg.Media.Remember(ctx, corp, md.Type, f.SHA256, id); err != nil {
			// The next send uploads again: costly, not wrong.
			d.log.Warn("could not cache the media id")
		}
		return id, nil
	})
	if err != nil {
		return err
	}
	m.Format, m.MediaID = md.Type, id
	return nil
}

// flight runs one call per key at a time in this process; callers with the
// same key while it runs get its result.
type flight struct {
	mu    sync.Mutex
	calls map[string]*flightCall
}

type flightCall struct {
	done chan struct{}
	val  string
	err  error
}

func (f *flight) do(key string, fn func() (string, error)) (string, error) {
	f.mu.Lock()
	if f.calls == nil {
		f.calls = map[string]*flightCall{}
	}
	if c, ok := f.calls[key]; ok {
		f.mu.Unlock()
		<-c.done
		return c.val, c.err
	}
	c := &flightCall{done: make(chan struct{})}
	f.calls[key] = c
	f.mu.Unlock()
	c.val, c.err = fn()
	f.mu.Lock()
	delete(f.calls, key)
	f.mu.Unlock()
	close(c.done)
	return c.val, c.err
}
