package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/accountstate"
	"github.com/msgpulse/msgpulse/internal/apikey"
	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/dlq"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/topology"
)

//go:embed web
var webFS embed.FS

// Prefix is where the API serves the console.
const Prefix = "/console"

// Deps are what the console reads and acts through; all are required
// except Timeline, Rates and Accounts.
type Deps struct {
	Log    *zap.Logger
	Model  *topology.Model
	Status *status.Store
	// Redis holds the sessions and the failed-login counters, under
	// Config.DLQ.RedisPrefix, shared by every API replica.
	Redis redis.UniversalClient
	// Conn is the API's broker connection (dlq.Tool reads the DLQs on
	// channels of its own; a replay publishes on a connection of its own).
	Conn func(ctx context.Context) (*amqp.Connection, error)
	// Inspect reads queue depths and consumer counts.
	Inspect func(ctx context.Context, names []string) ([]broker.QueueState, error)
	// Authenticate finds the API key an operator pasted; Lookup finds a
	// key by name, so a session ends when its key is removed, changed or
	// loses the admin scope.
	Authenticate func(key string) (apikey.Key, bool)
	Lookup       func(name string) (apikey.Key, bool)
	// ClientIP is the caller's address as the API takes it (its
	// TRUSTED_PROXIES included: api.Server.ClientIP); nil means the
	// connection's own address.
	ClientIP func(r *http.Request) string
	// Timeline gives the chart's points; nil hides the chart.
	Timeline Timeline
	// Rates gives the broker's message rates by queue name (from the
	// management API); nil, or an error, falls back to the depth's net
	// change between reloads.
	Rates func(ctx context.Context) (map[string]Rates, error)
	// Accounts reads the WeCom accounts' state exactly as
	// /api/queues/stats shows it (the API passes its own reader,
	// api.Server.WeComAccountStates); nil, or no account, hides the
	// table. It must only read, and never return a secret.
	Accounts func(ctx context.Context) ([]accountstate.State, error)
	// Fraud lists and lifts the SMS fraud guard's blocks; nil hides the
	// page.
	Fraud Fraud
	// Suppressions lists the tenants' suppression lists and removes
	// entries; nil hides the page.
	Suppressions Suppressions
}

// Rates are one queue's messages per second in (published) and out
// (delivered), as the broker measures them.
type Rates struct{ In, Out float64 }

// Config are the console's settings. No secret: a session is a random
// id naming a record in Redis, so there is nothing to sign.
type Config struct {
	// DLQ configures the dlq.Tool behind the dead-letter pages; its
	// RedisPrefix also prefixes the sessions and login counters.
	DLQ config.DLQ
	// SessionTTL is how long a login lasts (CONSOLE_SESSION_TTL).
	SessionTTL time.Duration
	// LoginFailures is how many logins one client address, and one key
	// name, may try per LoginWindow before the rest are refused (429)
	// without their key being checked.
	LoginFailures int
	LoginWindow   time.Duration
	// Refresh is how often the queue page reloads itself.
	Refresh time.Duration
	// ListLimit is the most dead letters one list page shows.
	ListLimit int
}

// Validate fills defaults and checks the rest.
func (c *Config) Validate() error {
	if c.SessionTTL <= 0 {
		c.SessionTTL = DefaultSessionTTL
	}
	if c.SessionTTL < time.Minute {
		return fmt.Errorf("console: a session of %s is too short to use (at least 1m)", c.SessionTTL)
	}
	if c.LoginFailures <= 0 {
		c.LoginFailures = 10
	}
	if c.LoginWindow <= 0 {
		c.LoginWindow = time.Minute
	}
	if c.Refresh <= 0 {
		c.Refresh = 5 * time.Second
	}
	if c.ListLimit <= 0 {
		c.ListLimit = 200
	}
	return nil
}

// DefaultSessionTTL is CONSOLE_SESSION_TTL's default.
const DefaultSessionTTL = 8 * time.Hour

// Console serves /console. Close stops the replays it runs in the
// background.
type Console struct {
	cfg   Config
	d     Deps
	log   *zap.Logger
	sess  sessions
	pages map[string]*template.Template
	mux   *http.ServeMux
	now   func() time.Time

	// Background replays: owned by the console, stopped by Close.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	jobsMu sync.Mutex
	jobs   map[string]*job
	jobSeq int

	rates  rateKeeper
	logins loginGuard
}

// New builds the console.
func New(cfg Config, d Deps) (*Console, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Model == nil || d.Status == nil || d.Conn == nil || d.Inspect == nil || d.Authenticate == nil || d.Lookup == nil || d.Redis == nil {
		return nil, errors.New("console: missing dependency")
	}
	if d.Log == nil {
		d.Log = zap.NewNop()
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	prefix := cfg.DLQ.RedisPrefix
	c := &Console{cfg: cfg, d: d, log: d.Log.Named("console"), sess: sessions{rdb: d.Redis, prefix: prefix, ttl: cfg.SessionTTL}, pages: pages, now: time.Now,
		ctx: ctx, cancel: cancel, jobs: map[string]*job{}, rates: rateKeeper{last: map[string]sample{}},
		logins: loginGuard{rdb: d.Redis, prefix: prefix, limit: cfg.LoginFailures, window: cfg.LoginWindow}}
	c.routes()
	return c, nil
}

// Close stops the background replays (each gives back what it holds) and
// waits for them.
func (c *Console) Close() {
	c.cancel()
	c.wg.Wait()
}

func (c *Console) routes() {
	m := http.NewServeMux()
	static, _ := fs.Sub(webFS, "web/static")
	m.Handle("GET /console/static/", http.StripPrefix("/console/static/", http.FileServerFS(static)))
	m.HandleFunc("GET /console/login", c.loginPage)
	m.HandleFunc("POST /console/login", c.login)
	m.HandleFunc("POST /console/logout", c.authed(c.logout))
	m.HandleFunc("GET /console", c.authed(func(w http.ResponseWriter, r *http.Request, _ *request) {
		http.Redirect(w, r, "/console/queues", http.StatusSeeOther)
	}))
	m.HandleFunc("GET /console/{$}", c.authed(func(w http.ResponseWriter, r *http.Request, _ *request) {
		http.Redirect(w, r, "/console/queues", http.StatusSeeOther)
	}))
	m.HandleFunc("GET /console/queues", c.authed(c.queuesPage))
	m.HandleFunc("GET /console/dlq", c.authed(c.dlqPage))
	m.HandleFunc("GET /console/dlq/{queue}", c.authed(c.onDLQ(c.options, c.dlqListPage)))
	m.HandleFunc("GET /console/dlq/{queue}/message/{id}", c.authed(c.onDLQ(noOptions, c.dlqShowPage)))
	m.HandleFunc("POST /console/dlq/{queue}/replay", c.authed(c.onDLQ(replayOptions, c.replay)))
	m.HandleFunc("GET /console/dlq/{queue}/purge", c.authed(c.onDLQ(purgeQuery, c.purgePage)))
	m.HandleFunc("POST /console/dlq/{queue}/export", c.authed(c.onDLQ(exportForm, c.export)))
	m.HandleFunc("POST /console/dlq/{queue}/purge", c.authed(c.onDLQ(purgeForm, c.purge)))
	m.HandleFunc("GET /console/jobs/{id}", c.authed(c.jobPage))
	m.HandleFunc("GET /console/messages", c.authed(c.messagePage))
	if c.d.Fraud != nil {
		m.HandleFunc("GET /console/fraud", c.authed(c.fraudPage))
		m.HandleFunc("GET /console/fraud/lift", c.authed(c.fraudLiftPage))
		m.HandleFunc("POST /console/fraud/lift", c.authed(c.fraudLift))
	}
	if c.d.Suppressions != nil {
		m.HandleFunc("GET /console/suppressions", c.authed(c.suppressionsPage))
		m.HandleFunc("POST /console/suppressions/remove", c.authed(c.suppressionRemove))
	}
	c.mux = m
}

// ServeHTTP sets the headers every console response carries and routes.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	// Nothing but this origin's stylesheet and forms: no script, no
	// frames, no CDN. Inline SVG needs no source.
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	// Every console form is a few fields; without this, ParseForm reads
	// 10 MB of a body, before any login (issue 43).
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	c.mux.ServeHTTP(w, r)
}

// maxFormBytes is the largest body the console reads.
const maxFormBytes = 64 << 10

// request is what an authenticated handler knows about its caller.
type request struct {
	Caller  apikey.Key
	session string
	CSRF    string
}

func (c *Console) authed(h func(http.ResponseWriter, *http.Request, *request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ck, err := r.Cookie(sessionCookie)
		var caller apikey.Key
		if err == nil {
			caller, err = c.sess.check(r.Context(), ck.Value, c.d.Lookup, c.now())
		} else {
			err = errSession
		}
		if err != nil && !errors.Is(err, errSession) {
			// A 503 saying Redis is away is the console working as
			// designed: warn, with no stack trace (those are for bugs).
			c.log.Warn("console: cannot read the session (Redis); answered 503", zap.Error(err))
			http.Error(w, "the console cannot read its sessions (Redis): try again shortly", http.StatusServiceUnavailable)
			return
		}
		if err != nil {
			if r.Method == http.MethodGet {
				http.Redirect(w, r, "/console/login", http.StatusSeeOther)
				return
			}
			http.Error(w, "log in to the console first", http.StatusUnauthorized)
			return
		}
		rq := &request{Caller: caller, session: ck.Value, CSRF: csrf(ck.Value)}
		if r.Method == http.MethodPost {
			if err := r.ParseForm(); err != nil || !checkCSRF(ck.Value, r.PostForm.Get("csrf")) {
				http.Error(w, "missing or wrong CSRF token: reload the page and try again", http.StatusForbidden)
				return
			}
		}
		h(w, r, rq)
	}
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	n := nonce()
	setCookie(w, r, loginCookie, n, 10*time.Minute)
	c.render(w, http.StatusOK, "login", nil, map[string]any{"Nonce": n})
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	ck, err := r.Cookie(loginCookie)
	if err != nil || r.ParseForm() != nil || ck.Value == "" || r.PostForm.Get("nonce") != ck.Value {
		http.Error(w, "the login form expired: reload it", http.StatusForbidden)
		return
	}
	// Counted per source as the API counts wrong keys (ratelimit.Source):
	// an IPv6 subscriber holds a whole /64, and would otherwise have 2^64
	// addresses to guess from (issue 43).
	ip, name := ratelimit.Source(c.clientIP(r)), strings.TrimSpace(r.PostForm.Get("name"))
	// Counted first, checked after: parallel guesses each see the others'
	// counts, so no more than the limit reach the key check.
	within, err := c.logins.count(r.Context(), ip, name)
	if err != nil {
		c.log.Warn("console login: cannot count logins (Redis); answered 503", zap.Error(err))
		http.Error(w, "the console cannot count logins (Redis): try again shortly", http.StatusServiceUnavailable)
		return
	}
	if !within {
		c.log.Warn("console login refused: too many failures", zap.String("ip", ip), zap.String("name_tried", c.loggable(name)))
		http.Error(w, "too many failed logins from your address or for this key name: wait a minute", http.StatusTooManyRequests)
		return
	}
	caller, ok := c.d.Authenticate(strings.TrimSpace(r.PostForm.Get("key")))
	// The name must be the key's own: guesses aimed at one key name are
	// then limited however many addresses they come from.
	if !ok || caller.Name != name || !Allowed(caller) {
		c.log.Info("console login refused", zap.String("ip", ip), zap.String("name_tried", c.loggable(name)))
		n := nonce()
		setCookie(w, r, loginCookie, n, 10*time.Minute)
		c.render(w, http.StatusUnauthorized, "login", nil, map[string]any{"Nonce": n, "Name": name, "Error": "That key name and key are not accepted here."})
		return
	}
	if err := c.logins.refund(r.Context(), ip, name); err != nil {
		c.log.Warn("console login: the successful login still counts as a failure", zap.Error(err))
	}
	id, err := c.sess.open(r.Context(), caller, c.now())
	if err != nil {
		c.log.Warn("console login: cannot store the session (Redis); answered 503", zap.Error(err))
		http.Error(w, "the console cannot store the session (Redis): try again shortly", http.StatusServiceUnavailable)
		return
	}
	setCookie(w, r, loginCookie, "", -time.Second)
	setCookie(w, r, sessionCookie, id, c.cfg.SessionTTL)
	c.log.Info("console login", zap.String("api_key", caller.Name), zap.String("ip", r.RemoteAddr))
	http.Redirect(w, r, "/console/queues", http.StatusSeeOther)
}

// loggable is a key name tried at login as the log may show it: only a
// configured name, since someone may paste the key into the name field.
func (c *Console) loggable(name string) string {
	if _, ok := c.d.Lookup(name); ok {
		return name
	}
	return "(not a key name)"
}

// logout ends the session on the server (a copy of the cookie is refused
// from then on, by every replica) and clears the cookie.
func (c *Console) logout(w http.ResponseWriter, r *http.Request, rq *request) {
	if err := c.sess.close(r.Context(), rq.session); err != nil {
		c.log.Warn("console logout: cannot end the session (Redis); answered 503", zap.Error(err))
		http.Error(w, "the console could not end the session (Redis): try again", http.StatusServiceUnavailable)
		return
	}
	setCookie(w, r, sessionCookie, "", -time.Second)
	c.log.Info("console logout", zap.String("api_key", rq.Caller.Name))
	http.Redirect(w, r, "/console/login", http.StatusSeeOther)
}

// render executes a page. Values are escaped by html/template; nothing
// is marked safe except the chart, built from numbers only.
func (c *Console) render(w http.ResponseWriter, code int, page string, rq *request, data map[string]any) {
	t, ok := c.pages[page]
	if !ok {
		http.Error(w, "no such page", http.StatusInternalServerError)
		return
	}
	if data == nil {
		data = map[string]any{}
	}
	data["Req"] = rq
	data["Now"] = c.now().UTC()
	data["Running"] = c.running()
	data["FraudPage"] = c.d.Fraud != nil
	data["SuppressionsPage"] = c.d.Suppressions != nil
	var b strings.Builder
	if err := t.ExecuteTemplate(&b, "layout", data); err != nil {
		c.log.Error("render", zap.String("page", page), zap.Error(err))
		http.Error(w, "could not render the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(b.String()))
}

// fail shows an error on a page of its own, escaped.
func (c *Console) fail(w http.ResponseWriter, rq *request, code int, err error) {
	c.render(w, code, "error", rq, map[string]any{"Error": err.Error()})
}

// answer is an error a page expects (not found, a bad cursor) and the
// status it is shown with.
type answer struct {
	is   error
	code int
}

// failed shows err's page, when there is an error, and reports whether it
// did: one of the page's expected answers with its status, any other error
// as 503, because it is a dependency (Redis, the broker) that failed.
func (c *Console) failed(w http.ResponseWriter, rq *request, err error, expected ...answer) bool {
	if err == nil {
		return false
	}
	code := http.StatusServiceUnavailable
	for _, a := range expected {
		if errors.Is(err, a.is) {
			code = a.code
			break
		}
	}
	c.fail(w, rq, code, err)
	return true
}

var pageNames = []string{"login", "error", "queues", "dlq", "dlqlist", "dlqshow", "confirm", "purge", "job", "message", "fraud", "fraudlift", "suppressions"}

func parsePages() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"when": func(t *time.Time) string {
			if t == nil || t.IsZero() {
				return "–"
			}
			return t.UTC().Format("2006-01-02 15:04:05Z")
		},
		"pct":  func(f float64) string { return fmt.Sprintf("%.0f%%", f*100) },
		"join": strings.Join,
		"deref": func(p *int) string {
			if p == nil {
				return "–"
			}
			return fmt.Sprint(*p)
		},
		"errtext": dlq.ErrorText,
	}
	base, err := template.New("base").Funcs(funcs).ParseFS(webFS, "web/layout.html")
	if err != nil {
		return nil, err
	}
	out := map[string]*template.Template{}
	for _, p := range pageNames {
		t, err := template.Must(base.Clone()).ParseFS(webFS, "web/"+p+".html")
		if err != nil {
			return nil, fmt.Errorf("console page %s: %w", p, err)
		}
		out[p] = t
	}
	return out, nil
}
