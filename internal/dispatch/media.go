package dispatch

import (
	"context"
	"fmt"

	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/provider"
)

// mediaUploader is the WeCom client's media side (wecom.Client).
type mediaUploader interface {
	CorpOf(m provider.WeCom) string
	UploadMedia(ctx context.Context, m provider.WeCom, kind, filename string, data []byte) (string, error)
}

// wecomMedia fetches a media message's file (through the egress guard,
// within WeCom's limits) and sets m's media_id: the one cached for the
// same bytes in the corp, else a fresh upload, then cached.
func (d *Dispatcher) wecomMedia(ctx, sctx context.Context, md *envelope.Media, m *provider.WeCom) error {
	up, ok := d.cfg.WeCom.(mediaUploader)
	if d.cfg.Media == nil || !ok {
		return fmt.Errorf("%w: this consumer cannot send WeCom media", ErrTemplate)
	}
	f, err := d.cfg.Media.Fetch(sctx, md.URL, md.Type)
	if err != nil {
		return err
	}
	corp := up.CorpOf(*m)
	id, err := d.cfg.Media.Cached(ctx, corp, md.Type, f.SHA256)
	if err != nil {
		return fmt.Errorf("%w: %w", errRedis, err)
	}
	if id == "" {
		if id, err = up.UploadMedia(sctx, *m, md.Type, md.Filename, f.Data); err != nil {
			return err
		}
		if err := d.cfg.Media.Remember(ctx, corp, md.Type, f.SHA256, id); err != nil {
			// The next send uploads again: costly, not wrong.
			d.log.Warn("could not cache the media id")
		}
	}
	m.Format, m.MediaID = md.Type, id
	return nil
}
