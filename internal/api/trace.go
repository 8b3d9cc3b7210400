package api

import (
	"github.com/labstack/echo/v5"

	"github.com/msgpulse/msgpulse/internal/telemetry"
)

// traced gives each request its server span (a child of the caller's
// traceparent, when it sent one) and its traceresponse header. New installs
// it only while tracing is on, so that off it costs nothing.
func (s *Server) traced(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c *echo.Context) error {
		r := c.Request()
		ctx, span := telemetry.StartServer(r.Context(), r.Method, r.Header, c.Response().Header())
		c.SetRequest(r.WithContext(ctx))
		defer span.End()
		err := next(c) // observe, inside, has answered errors already
		code, route := answered(c)
		span.Served(r.Method, route, code)
		return err
	}
}
