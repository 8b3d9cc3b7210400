package console

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"time"

	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/fraud"
)

// Fraud lists and lifts the SMS fraud guard's blocks: the API's
// fraud.Guard, the one GET /api/fraud/blocks reads. The pages are served
// only with one.
type Fraud interface {
	Blocks(ctx context.Context, tenant string) ([]fraud.Block, error)
	Lift(ctx context.Context, tenant, prefix string) error
}

// blockRow is a block as the page shows it.
type blockRow struct {
	fraud.Block
	Left string // what is left of it
	Lift string // the confirmation page's URL
}

func (c *Console) fraudPage(w http.ResponseWriter, r *http.Request, rq *request) {
	bs, err := c.d.Fraud.Blocks(r.Context(), "") // the console is the operator's: every tenant's
	if c.failed(w, rq, err) {
		return
	}
	now := c.now()
	rows := make([]blockRow, len(bs))
	for i, b := range bs {
		q := url.Values{"tenant": {b.Tenant}, "prefix": {b.Prefix}}
		rows[i] = blockRow{Block: b, Left: b.Until.Sub(now).Round(time.Second).String(), Lift: "/console/fraud/lift?" + q.Encode()}
	}
	c.render(w, http.StatusOK, "fraud", rq, map[string]any{"Blocks": rows, "Lifted": r.URL.Query().Get("lifted")})
}

// fraudLiftPage asks for confirmation before a lift.
func (c *Console) fraudLiftPage(w http.ResponseWriter, r *http.Request, rq *request) {
	tenant, prefix := r.URL.Query().Get("tenant"), r.URL.Query().Get("prefix")
	bs, err := c.d.Fraud.Blocks(r.Context(), tenant)
	if c.failed(w, rq, err) {
		return
	}
	for _, b := range bs {
		if b.Prefix == prefix {
			c.render(w, http.StatusOK, "fraudlift", rq, map[string]any{"Block": b})
			return
		}
	}
	c.fail(w, rq, http.StatusNotFound, errors.New("no block of "+prefix+" for tenant "+tenant+" is in force"))
}

// fraudLift lifts a block, once confirmed: the next code to the prefix
// goes through on every replica.
func (c *Console) fraudLift(w http.ResponseWriter, r *http.Request, rq *request) {
	tenant, prefix := r.PostForm.Get("tenant"), r.PostForm.Get("prefix")
	if r.PostForm.Get("confirmed") != "yes" || tenant == "" || prefix == "" {
		c.fail(w, rq, http.StatusBadRequest, errors.New("a lift names its tenant and prefix and is confirmed"))
		return
	}
	err := c.d.Fraud.Lift(r.Context(), tenant, prefix)
	if c.failed(w, rq, err, answer{fraud.ErrNoBlock, http.StatusNotFound}) {
		return
	}
	c.log.Info("console: fraud guard block lifted", zap.String("tenant", tenant), zap.String("prefix", prefix), zap.String("api_key", rq.Caller.Name))
	http.Redirect(w, r, "/console/fraud?"+url.Values{"lifted": {tenant + " " + prefix}}.Encode(), http.StatusSeeOther)
}
