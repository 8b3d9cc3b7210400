package console

import (
	"context"
	"errors"
	"net/http"
	"net/url"

	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/logging"
	"github.com/msgpulse/msgpulse/internal/suppression"
)

// Suppressions lists and edits the tenants' suppression lists: the API's
// suppression.Store, the one GET /api/suppressions reads. The page is
// served only with one.
//
// The page shows recipients in full, unlike the message pages (mask.go):
// finding and removing an address is what it is for, and the admin key a
// console session is opened with reads them in full through
// GET /api/suppressions anyway.
type Suppressions interface {
	List(ctx context.Context, f suppression.Filter) (suppression.Page, error)
	Remove(ctx context.Context, tenant, channel, recipient string) (bool, error)
}

// suppressionsPageSize is how many entries one page shows.
const suppressionsPageSize = 50

// suppressionsPage lists every tenant's entries (the console is the
// operator's), filtered and paged as GET /api/suppressions does. Reading
// changes nothing: each row's Remove is a form posted with the session's
// CSRF token.
func (c *Console) suppressionsPage(w http.ResponseWriter, r *http.Request, rq *request) {
	q := r.URL.Query()
	f := suppression.Filter{Tenant: q.Get("tenant"), Channel: q.Get("channel"), Recipient: q.Get("recipient"), Cursor: q.Get("cursor"), Limit: suppressionsPageSize}
	data := map[string]any{"Tenant": f.Tenant, "Channel": f.Channel, "Recipient": f.Recipient, "Removed": q.Get("removed")}
	if f.Channel != "" && !suppression.Suppressible(f.Channel) {
		c.fail(w, rq, http.StatusBadRequest, errors.New("channel must be email or sms"))
		return
	}
	p, err := c.d.Suppressions.List(r.Context(), f)
	if c.failed(w, rq, err, answer{suppression.ErrCursor, http.StatusBadRequest}) {
		return
	}
	data["Entries"] = p.Entries
	if p.Next != "" {
		next := url.Values{"cursor": {p.Next}}
		for k, v := range map[string]string{"tenant": f.Tenant, "channel": f.Channel, "recipient": f.Recipient} {
			if v != "" {
				next.Set(k, v)
			}
		}
		data["Next"] = "/console/suppressions?" + next.Encode()
	}
	c.render(w, http.StatusOK, "suppressions", rq, data)
}

// suppressionRemove takes one recipient off a tenant's list: its next
// code or notice goes out again. The banner it redirects to names the
// recipient masked: the URL stays in the browser's history.
func (c *Console) suppressionRemove(w http.ResponseWriter, r *http.Request, rq *request) {
	tenant, channel, recipient := r.PostForm.Get("tenant"), r.PostForm.Get("channel"), r.PostForm.Get("recipient")
	if tenant == "" || !suppression.Suppressible(channel) || recipient == "" {
		c.fail(w, rq, http.StatusBadRequest, errors.New("a removal names its tenant, channel (email or sms) and recipient"))
		return
	}
	removed, err := c.d.Suppressions.Remove(r.Context(), tenant, channel, recipient)
	if err != nil && !removed {
		code := http.StatusServiceUnavailable
		if _, nerr := suppression.Normalize(channel, recipient); nerr != nil {
			code = http.StatusBadRequest
		}
		c.fail(w, rq, code, err)
		return
	}
	if !removed {
		c.fail(w, rq, http.StatusNotFound, errors.New(channel+" "+recipient+" is not on tenant "+tenant+"'s suppression list"))
		return
	}
	c.log.Info("console: suppression removed", zap.String("tenant", tenant), zap.String("channel", channel), zap.String("api_key", rq.Caller.Name))
	http.Redirect(w, r, "/console/suppressions?"+url.Values{"removed": {tenant + " " + channel + " " + logging.Mask(recipient)}}.Encode(), http.StatusSeeOther)
}
