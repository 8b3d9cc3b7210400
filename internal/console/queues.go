package console

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/accountstate"
	"github.com/msgpulse/msgpulse/internal/provider/wecom"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// queueRow is one queue of the model as the queue page shows it.
type queueRow struct {
	Name, Role, Channel string
	Exists              bool
	Depth, Consumers    int
	MaxLength           int     // 0 = unbounded
	Fill                float64 // depth / max length
	FillPx              int     // width of the fill bar
	Rate                string  // in and out per second, or the depth's net change
	Status              string  // ok, warning, missing
}

// sample is a queue's depth when the page was last drawn, for the rate.
type sample struct {
	depth int
	at    time.Time
}

// rateKeeper turns successive depths into a net rate. It needs no
// management plugin: the page reloads itself, so every reload is a sample.
type rateKeeper struct {
	mu   sync.Mutex
	last map[string]sample
}

func (k *rateKeeper) rate(name string, depth int, now time.Time) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	prev, ok := k.last[name]
	k.last[name] = sample{depth: depth, at: now}
	dt := now.Sub(prev.at).Seconds()
	if !ok || dt < 0.5 || dt > 10*60 {
		return "–"
	}
	return fmt.Sprintf("%+.1f/s", float64(depth-prev.depth)/dt)
}

const fillBarPx = 120

func (c *Console) queueRows(r *http.Request) ([]queueRow, error) {
	qs := c.d.Model.Queues
	names := make([]string, len(qs))
	for i, q := range qs {
		names[i] = q.Name
	}
	states, err := c.d.Inspect(r.Context(), names)
	if err != nil {
		return nil, err
	}
	now := c.now()
	var rates map[string]Rates
	if c.d.Rates != nil {
		if rates, err = c.d.Rates(r.Context()); err != nil {
			rates = nil // the net rate below still says which way a queue goes
			c.log.Debug("queue rates unavailable", zap.Error(err))
		}
	}
	rows := make([]queueRow, 0, len(states))
	for i, st := range states {
		q := qs[i]
		row := queueRow{Name: q.Name, Role: string(q.Role), Channel: q.Channel, Exists: st.Exists, Depth: st.Messages, Consumers: st.Consumers, Rate: "–"}
		row.MaxLength, row.Fill, row.Status = q.Fill(st.Messages, st.Exists)
		row.FillPx = min(fillBarPx, int(row.Fill*fillBarPx+0.5))
		if st.Exists {
			row.Rate = c.rates.rate(q.Name, st.Messages, now)
		}
		if rt, ok := rates[q.Name]; ok {
			row.Rate = fmt.Sprintf("in %.1f · out %.1f", rt.In, rt.Out)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func (c *Console) queuesPage(w http.ResponseWriter, r *http.Request, rq *request) {
	rows, err := c.queueRows(r)
	if err != nil {
		c.fail(w, rq, http.StatusServiceUnavailable, fmt.Errorf("queue depths are unavailable (RabbitMQ): %w", err))
		return
	}
	data := map[string]any{"Queues": rows, "Warn": topology.FillWarning, "Refresh": int(c.cfg.Refresh.Seconds()), "BarPx": fillBarPx}
	if c.d.Timeline != nil {
		pts, err := c.d.Timeline.LastHour(r.Context(), c.now())
		if err != nil {
			data["ChartError"] = err.Error()
		} else {
			data["Chart"] = chart(pts)
		}
	}
	if c.d.Accounts != nil {
		// Best effort, as in /api/queues/stats: the queues do not need it.
		accts, err := c.d.Accounts(r.Context())
		if err != nil {
			data["AccountsError"] = err.Error()
		} else if len(accts) > 0 {
			data["Accounts"] = accountRows(accts)
		}
	}
	c.render(w, http.StatusOK, "queues", rq, data)
}

// accountRow is one WeCom account as the queue page shows it: the fields
// of /api/queues/stats' wecomAccounts, formatted. accountstate.State holds
// names only, never a secret.
type accountRow struct {
	Account, Status, DownReason, DownUntil string
	Health                                 string // success rate in the health window
	Sends, Succeeded                       int64
	Rate                                   string // per second the consumers hold it to, or –
	Tenants                                string // – : every tenant
	Limits                                 string // WECOM_ACCOUNT_LIMITS, e.g. 20/s · 600/min; none: –
}

// windowUnits name the windows of wecom.Limits on the queues page.
var windowUnits = map[time.Duration]string{time.Second: "s", time.Minute: "min", time.Hour: "h", 24 * time.Hour: "day"}

func accountRows(states []accountstate.State) []accountRow {
	rows := make([]accountRow, 0, len(states))
	for _, st := range states {
		row := accountRow{Account: st.Account, Status: st.Status, DownReason: st.DownReason, Health: fmt.Sprintf("%.0f%%", st.Health*100),
			Sends: st.Sends, Succeeded: st.Succeeded, Rate: "–", Tenants: "every tenant", Limits: "–"}
		if st.DownUntil != nil {
			row.DownUntil = st.DownUntil.UTC().Format("15:04:05 UTC")
		}
		if st.RatePerSecond != nil {
			row.Rate = fmt.Sprintf("%.2f", *st.RatePerSecond)
		}
		if len(st.Tenants) > 0 {
			row.Tenants = strings.Join(st.Tenants, ", ")
		}
		if l := st.Limits; l != nil {
			var parts []string
			for _, w := range wecom.Limits(*l).Windows() {
				parts = append(parts, fmt.Sprintf("%d/%s", w.N, windowUnits[w.Per]))
			}
			if len(parts) > 0 {
				row.Limits = strings.Join(parts, " · ")
			}
		}
		rows = append(rows, row)
	}
	return rows
}
