package api

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v5"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/topology"
)

func rlRequest(rules []ratelimit.Rule) ratelimit.Request {
	return ratelimit.Request{Rules: nonEmpty(rules)}
}

func rateLimitError(err error, id string) error {
	switch {
	case errors.Is(err, ratelimit.ErrNotFound):
		return notFound("no rate limit with id %s", id)
	case errors.Is(err, ratelimit.ErrExists):
		return &apiError{Status: http.StatusConflict, Msg: fmt.Sprintf("a rate limit with id %s already exists", id)}
	case errors.Is(err, ratelimit.ErrTooMany):
		return &apiError{Status: http.StatusConflict, Msg: fmt.Sprintf("there are %d rate limits already, the most there may be: delete one first", ratelimit.MaxConfigs)}
	}
	return unavailable(err, "rate-limit configuration is unavailable (Redis); try again")
}

func (s *Server) listRateLimits(c *echo.Context) error {
	cs, err := s.d.RateLimits.List(c.Request().Context())
	if err != nil {
		return rateLimitError(err, "")
	}
	if cs == nil {
		cs = []ratelimit.Config{}
	}
	return reply(c, http.StatusOK, "ok", cs)
}

func (s *Server) decodeRateLimit(c *echo.Context) (ratelimit.Config, error) {
	var rc ratelimit.Config
	if e := checkContentType(c.Request()); e != nil {
		return rc, e
	}
	if e := decodeJSON(c.Request().Body, s.opts.BodyLimit, &rc); e != nil {
		return rc, e
	}
	return rc, nil
}

func (s *Server) createRateLimit(c *echo.Context) error {
	rc, err := s.decodeRateLimit(c)
	if err != nil {
		return err
	}
	probe := rc
	if probe.ID == "" {
		probe.ID = "new" // the store generates the id; validate the rest now
	}
	if err := probe.Validate(); err != nil {
		return badRequest("%v", err)
	}
	out, err := s.d.RateLimits.Create(c.Request().Context(), rc)
	if err != nil {
		return rateLimitError(err, rc.ID)
	}
	s.logRateLimitChange(c, "rate limit created", out.ID, &out)
	return reply(c, http.StatusCreated, "rate limit created", out)
}

func (s *Server) getRateLimit(c *echo.Context) error {
	id := c.Param("id")
	rc, err := s.d.RateLimits.Get(c.Request().Context(), id)
	if err != nil {
		return rateLimitError(err, id)
	}
	return reply(c, http.StatusOK, "ok", rc)
}

func (s *Server) updateRateLimit(c *echo.Context) error {
	id := c.Param("id")
	rc, err := s.decodeRateLimit(c)
	if err != nil {
		return err
	}
	if rc.ID != "" && rc.ID != id {
		return badRequest("id in the body (%s) differs from the id in the path (%s)", rc.ID, id)
	}
	rc.ID = id
	if err := rc.Validate(); err != nil {
		return badRequest("%v", err)
	}
	out, err := s.d.RateLimits.Update(c.Request().Context(), rc)
	if err != nil {
		return rateLimitError(err, id)
	}
	s.logRateLimitChange(c, "rate limit updated", id, &out)
	return reply(c, http.StatusOK, "rate limit updated", out)
}

func (s *Server) deleteRateLimit(c *echo.Context) error {
	id := c.Param("id")
	if err := s.d.RateLimits.Delete(c.Request().Context(), id); err != nil {
		return rateLimitError(err, id)
	}
	s.logRateLimitChange(c, "rate limit deleted", id, nil)
	return reply(c, http.StatusOK, "rate limit deleted", nil)
}

// logRateLimitChange says who changed the global limits, and to what: an
// operator asking why traffic is refused finds the key that did it.
func (s *Server) logRateLimitChange(c *echo.Context, what, id string, rc *ratelimit.Config) {
	k := Caller(c)
	fields := []zap.Field{zap.String("id", id), zap.String("api_key", k.Name), zap.String("tenant", k.Tenant)}
	if rc != nil {
		fields = append(fields, zap.Any("config", rc))
	}
	s.log.Info(what, fields...)
}

// QueueStat is one queue in GET /api/queues/stats.
type QueueStat struct {
	Name    string `json:"name"`
	Role    string `json:"role"`
	Channel string `json:"channel"`
	// Level is a main queue's traffic level: high, normal or low.
	Level string `json:"level,omitempty"`
	// OldestAgeSeconds is how long the head message has waited, where the
	// broker reports it (classic queues, through the management API).
	OldestAgeSeconds *float64 `json:"oldestAgeSeconds,omitempty"`
	Messages         int      `json:"messages"`
	Consumers        int      `json:"consumers"`
	MaxLength        int      `json:"maxLength"`
	Usage            float64  `json:"usage"`
	Status           string   `json:"status"`
}

// apiChannelOf spells a topology channel as the API does: only mail has
// another name (email); every other channel, wecom and any later one, is
// spelled the same, so a new channel needs no edit here.
func apiChannelOf(ch string) string {
	if ch == topology.Mail {
		return chEmail
	}
	return ch
}

func (s *Server) queueStats(c *echo.Context) error {
	var names []string
	for _, q := range s.d.Model.Queues {
		names = append(names, q.Name)
	}
	states, err := s.d.Inspect(c.Request().Context(), names)
	if err != nil {
		return unavailable(err, "queue statistics are unavailable (RabbitMQ): %v", err)
	}
	var ages map[string]time.Time
	if s.d.Ages != nil {
		// Best effort: the depths above do not need the management API.
		if ages, err = s.d.Ages(c.Request().Context()); err != nil {
			s.log.Debug("queue ages unavailable (management API)", zap.Error(err))
		}
	}
	now := s.now()
	out := make([]QueueStat, 0, len(states))
	for i, st := range states {
		q := s.d.Model.Queues[i]
		role := string(q.Role)
		if q.Role == topology.RoleRelayDeadLetter {
			role = string(topology.RoleDeadLetter)
		}
		qs := QueueStat{Name: st.Name, Role: role, Channel: apiChannelOf(q.Channel), Level: string(q.Level), Messages: st.Messages, Consumers: st.Consumers}
		qs.MaxLength, qs.Usage, qs.Status = q.Fill(st.Messages, st.Exists)
		if at, ok := ages[q.Name]; ok && st.Messages > 0 {
			age := max(now.Sub(at), 0).Seconds()
			qs.OldestAgeSeconds = &age
		}
		out = append(out, qs)
	}
	data := map[string]any{"queues": out}
	if s.d.Accounts != nil {
		// Best effort, like the ages: the queues do not need it.
		accts, err := s.wecomAccounts(c.Request().Context())
		if err != nil {
			s.log.Debug("WeCom account state unavailable (Redis)", zap.Error(err))
		} else {
			data["wecomAccounts"] = accts
		}
	}
	return reply(c, http.StatusOK, "ok", data)
}

func (s *Server) dlqStats(c *echo.Context) error {
	if s.d.DLQ == nil {
		return unavailable(nil, "DLQ statistics are not configured")
	}
	stats, err := s.d.DLQ(c.Request().Context())
	if err != nil {
		return unavailable(err, "DLQ statistics are unavailable: %v", err)
	}
	return reply(c, http.StatusOK, "ok", stats)
}
