package client

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The suppression calls send what the contract names: the filters as the
// query, the recipient URL-escaped in the path, the tenant as a query
// parameter only when given.
func TestSuppressionCalls(t *testing.T) {
	const entry = `{"tenant":"shop","channel":"sms","recipient":"+14155550100","reason":"opt_out","code":"21610","at":"2026-11-29T08:00:00Z"}`
	want := Suppression{Tenant: "shop", Channel: "sms", Recipient: "+14155550100", Reason: "opt_out", Code: "21610", At: time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)}
	for _, tc := range []struct {
		name                string
		call                func(context.Context, *Client) (any, error)
		status              int
		resp                string
		method, path, query string
		body                string
		want                any
	}{
		{
			name:   "list, first page",
			call:   func(ctx context.Context, c *Client) (any, error) { return c.ListSuppressions(ctx, SuppressionFilter{}) },
			status: 200, resp: `{"code":200,"msg":"ok","data":{"entries":[` + entry + `],"next":"abc"}}`,
			method: "GET", path: "/api/suppressions",
			want: &SuppressionPage{Entries: []Suppression{want}, Next: "abc"},
		},
		{
			name: "list with filters",
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.ListSuppressions(ctx, SuppressionFilter{Channel: "sms", Recipient: "+14155550100", Tenant: "shop", Cursor: "abc", Limit: 10})
			},
			status: 200, resp: `{"code":200,"msg":"ok","data":{"entries":[]}}`,
			method: "GET", path: "/api/suppressions", query: "channel=sms&recipient=%2B14155550100&tenant=shop&limit=10&cursor=abc",
			want: &SuppressionPage{Entries: []Suppression{}},
		},
		{
			name: "add",
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.AddSuppression(ctx, SuppressionInput{Channel: "sms", Recipient: "+1 415 555 0100", Reason: "opt_out", Code: "21610"})
			},
			status: 201, resp: `{"code":201,"msg":"recipient suppressed","data":` + entry + `}`,
			method: "POST", path: "/api/suppressions", body: `{"channel":"sms","recipient":"+1 415 555 0100","reason":"opt_out","code":"21610"}`,
			want: &want,
		},
		{
			name: "delete, own tenant",
			call: func(ctx context.Context, c *Client) (any, error) {
				return "ok", c.DeleteSuppression(ctx, "email", "a+b/c@example.com", "")
			},
			status: 200, resp: `{"code":200,"msg":"suppression removed","data":null}`,
			method: "DELETE", path: "/api/suppressions/email/a+b%2Fc@example.com",
			want: "ok",
		},
		{
			name: "delete, another tenant",
			call: func(ctx context.Context, c *Client) (any, error) {
				return "ok", c.DeleteSuppression(ctx, "sms", "+14155550100", "shop")
			},
			status: 200, resp: `{"code":200,"msg":"suppression removed","data":null}`,
			method: "DELETE", path: "/api/suppressions/sms/+14155550100", query: "tenant=shop",
			want: "ok",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newFakeServer(t, answer{Status: tc.status, Body: tc.resp})
			got, err := tc.call(t.Context(), newTestClient(t, srv.URL))
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			reqs := srv.requests()
			require.Len(t, reqs, 1)
			require.Equal(t, tc.method, reqs[0].Method)
			require.Equal(t, tc.path, reqs[0].Path)
			require.Equal(t, tc.query, reqs[0].Query)
			if tc.body != "" {
				require.JSONEq(t, tc.body, reqs[0].Body)
			}
		})
	}
	c := newTestClient(t, "http://127.0.0.1:1")
	require.ErrorContains(t, c.DeleteSuppression(t.Context(), "email", "", ""), "invalid recipient")
}
