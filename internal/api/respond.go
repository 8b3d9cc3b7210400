package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v5"
	"go.uber.org/zap"
)

// Envelope is every response's shape (seed 000).
type Envelope struct {
	Code int    `json:"code"`
	Msg  string `json:"msg"`
	Data any    `json:"data"`
}

func reply(c *echo.Context, status int, msg string, data any) error {
	return c.JSON(status, Envelope{Code: status, Msg: msg, Data: data})
}

// apiError is a handler's answer for anything but success.
type apiError struct {
	Status     int
	Msg        string
	Data       any
	RetryAfter time.Duration
	Limit      string // rate-limit metric label, when Status is 429
	cause      error
}

func (e *apiError) Error() string {
	if e.cause != nil {
		return fmt.Sprintf("%d %s: %v", e.Status, e.Msg, e.cause)
	}
	return fmt.Sprintf("%d %s", e.Status, e.Msg)
}

func (e *apiError) Unwrap() error { return e.cause }

func badRequest(format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Msg: fmt.Sprintf(format, args...)}
}

func notFound(format string, args ...any) *apiError {
	return &apiError{Status: http.StatusNotFound, Msg: fmt.Sprintf(format, args...)}
}

// unavailable is a 503; every 503 says when to come back (Retry-After),
// 1 s unless the caller sets a longer wait.
func unavailable(cause error, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusServiceUnavailable, Msg: fmt.Sprintf(format, args...), RetryAfter: unavailableRetryAfter, cause: cause}
}

// internal hides the cause from the caller; it is logged.
// asAPIError is err as the answer: itself when it is one, else a 500.
func asAPIError(err error) *apiError {
	var e *apiError
	if errors.As(err, &e) {
		return e
	}
	return internal(err)
}

func internal(cause error) *apiError {
	return &apiError{Status: http.StatusInternalServerError, Msg: "internal error", cause: cause}
}

// handleError turns any error into the envelope. Errors from echo itself
// (no route, wrong method) keep their status.
func (s *Server) handleError(c *echo.Context, err error) {
	if r, uerr := echo.UnwrapResponse(c.Response()); uerr == nil && r.Committed {
		return
	}
	var ae *apiError
	if !errors.As(err, &ae) {
		code := echo.StatusCode(err)
		switch code {
		case 0, http.StatusInternalServerError:
			ae = internal(err)
		case http.StatusNotFound:
			ae = notFound("no such endpoint: %s %s", c.Request().Method, c.Request().URL.Path)
		case http.StatusMethodNotAllowed:
			ae = &apiError{Status: code, Msg: fmt.Sprintf("method %s not allowed on %s", c.Request().Method, c.Request().URL.Path)}
		case http.StatusRequestEntityTooLarge:
			ae = &apiError{Status: code, Msg: fmt.Sprintf("request body larger than %d bytes", s.opts.BodyLimit)}
		default:
			ae = &apiError{Status: code, Msg: http.StatusText(code), cause: err}
		}
	}
	// Not logged here: observe writes the request's one line, with the
	// cause, at the level its status deserves (requestLevel).
	if ae.RetryAfter > 0 {
		secs := int((ae.RetryAfter + time.Second - 1) / time.Second)
		c.Response().Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
	}
	if err := reply(c, ae.Status, ae.Msg, ae.Data); err != nil {
		s.log.Warn("write error response", zap.Error(err))
	}
}
