package api

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// nothingKept fails unless no message reached the channel's queues and no
// status record or limit was written.
func (h *harness) nothingKept(channel string) {
	h.t.Helper()
	q := h.queue(channel)
	for _, name := range []string{q, q + ".normal", q + ".low"} {
		require.Zero(h.t, h.depth(name), "nothing published to %s", name)
	}
	require.Empty(h.t, h.keysMatching("status:*"), "no status record")
	require.Empty(h.t, h.keysMatching("ratelimit:*"), "nothing counted")
}

// A template of kind code is never a message: through /api/messages/* it
// would carry a code its sender chose, past the code limits.
func TestCodeTemplateIsNotAMessage(t *testing.T) {
	h := setup(t, options{keys: tenantKeys(t)})
	vars := map[string]string{"code": "123456", "ttlMinutes": "10"}
	for _, tc := range []struct {
		name, path string
		body       map[string]any
	}{
		{"send email", "/api/messages/send", map[string]any{"messageType": "EMAIL", "templateCode": "verify_code", "recipient": "a@example.com", "variables": vars}},
		{"send sms", "/api/messages/send", map[string]any{"messageType": "SMS", "templateCode": "verify_code", "recipient": "+8613900001234", "variables": vars}},
		{"batch", "/api/messages/batch", map[string]any{"messageType": "EMAIL", "templateCode": "verify_code", "recipients": []string{"a@example.com", "b@example.com"}, "variables": vars}},
	} {
		r := h.do("POST", tc.path, tc.body, "X-API-Key", shopKey)
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", tc.name, r.Msg)
		require.Contains(t, r.Msg, "/api/verification-codes", tc.name)
	}
	h.nothingKept("mail")
	h.nothingKept("sms")
}

// A batch copies its variables into every recipient's message: over
// BATCH_MAX_BYTES of envelopes it is 413, naming the setting, before
// anything is counted, written or published; the request body itself is
// well inside the body limit, so this check is the one that answers.
func TestBatchOverBatchMaxBytesIsRefusedWhole(t *testing.T) {
	h := setup(t, options{keys: tenantKeys(t)}) // BATCH_MAX_BYTES at its default, 8 MiB
	vars := map[string]string{"title": "t", "content": "c"}
	for i := range maxVariables - 2 {
		vars[fmt.Sprintf("pad%02d", i)] = strings.Repeat("x", maxVariableBytes)
	}
	var to []string
	for i := range MaxBatchRecipients {
		to = append(to, fmt.Sprintf("user%04d@example.com", i))
	}
	body := map[string]any{"messageType": "EMAIL", "templateCode": "notice", "recipients": to, "variables": vars}
	r := h.do("POST", "/api/messages/batch", body, "X-API-Key", shopKey)
	require.Equal(t, http.StatusRequestEntityTooLarge, r.Status, r.Msg)
	require.Contains(t, r.Msg, "BATCH_MAX_BYTES (8388608)")
	t.Logf("1000 recipients × %d variables of %d bytes: %s", len(vars), maxVariableBytes, r.Msg)
	h.nothingKept("mail")

	// The same message to 50 recipients (about 6.4 MB of envelopes) passes.
	body["recipients"] = to[:50]
	r = h.do("POST", "/api/messages/batch", body, "X-API-Key", shopKey)
	require.Equal(t, http.StatusAccepted, r.Status, r.Msg)
	require.Equal(t, 50, h.depth(h.queue("mail")+".normal"))
}

// A smaller BATCH_MAX_BYTES is honoured as set, on the WeCom application
// batch too (one envelope listing every recipient).
func TestBatchMaxBytesIsTheSetting(t *testing.T) {
	h := setup(t, options{keys: tenantKeys(t), batchMaxBytes: 16 << 10})
	var to []string
	for i := range 100 {
		to = append(to, fmt.Sprintf("user%04d@example.com", i))
	}
	r := h.do("POST", "/api/messages/batch", map[string]any{"messageType": "EMAIL", "templateCode": "notice", "recipients": to,
		"variables": map[string]string{"title": "t", "content": strings.Repeat("c", 200)}}, "X-API-Key", shopKey)
	require.Equal(t, http.StatusRequestEntityTooLarge, r.Status, r.Msg)
	require.Contains(t, r.Msg, "BATCH_MAX_BYTES (16384)")
	h.nothingKept("mail")
	var users []string
	for i := range 1000 {
		users = append(users, fmt.Sprintf("u%04d", i))
	}
	r = h.do("POST", "/api/messages/batch", map[string]any{"messageType": "WECOM", "templateCode": "notice", "recipients": users,
		"variables": map[string]string{"title": "t", "content": "c"}}, "X-API-Key", shopKey)
	require.Equal(t, http.StatusRequestEntityTooLarge, r.Status, "1000 userids and their task ids are over 16 KiB: %s", r.Msg)
	r = h.do("POST", "/api/messages/batch", map[string]any{"messageType": "WECOM", "templateCode": "notice", "recipients": users[:100],
		"variables": map[string]string{"title": "t", "content": strings.Repeat("c", 2000)}}, "X-API-Key", shopKey)
	require.Equal(t, http.StatusAccepted, r.Status, "one envelope: the variables once, not 100 times: %s", r.Msg)
}

// A WeCom robot belongs to the tenants WECOM_ROBOTS lists with it: another
// tenant's robot is 404, word for word the answer for one that does not
// exist; a robot that lists none is every tenant's.
func TestAnotherTenantsRobotIsNotFound(t *testing.T) {
	h := setup(t, options{keys: tenantKeys(t), robots: map[string][]string{"shop-ops": {"shop"}, "all-hands": nil}})
	robotMsg := func(robot string) map[string]any {
		return noticeBody("WECOM_ROBOT", func(m map[string]any) { m["recipient"] = robot })
	}
	unknown := h.send(blogKey, robotMsg("no-such-robot"))
	require.Equal(t, http.StatusNotFound, unknown.Status, unknown.Msg)
	for _, tc := range []struct {
		name, key, robot string
		want             int
	}{
		{"blog to shop's robot", blogKey, "shop-ops", 404},
		{"shop to its robot", shopKey, "shop-ops", 202},
		{"blog to everyone's robot", blogKey, "all-hands", 202},
		{"shop to everyone's robot", shopKey, "all-hands", 202},
	} {
		r := h.send(tc.key, robotMsg(tc.robot))
		require.Equal(t, tc.want, r.Status, "%s: %s", tc.name, r.Msg)
		if tc.want == 404 {
			require.Equal(t, strings.ReplaceAll(unknown.Msg, "no-such-robot", tc.robot), r.Msg, "%s: the answer for an unknown robot", tc.name)
		}
	}
	// @all too, and in a batch the robot is refused alone, with the 404 a
	// single send gets.
	r := h.send(blogKey, noticeBody("WECOM_ROBOT", func(m map[string]any) { m["recipient"], m["mentions"] = "shop-ops", []string{"@all"} }))
	require.Equal(t, http.StatusNotFound, r.Status, r.Msg)
	r = h.do("POST", "/api/messages/batch", noticeBody("WECOM_ROBOT", func(m map[string]any) { m["recipients"] = []string{"shop-ops", "all-hands"} }), "X-API-Key", blogKey)
	require.Equal(t, http.StatusAccepted, r.Status, r.Msg)
	var res BatchResult
	r.data(t, &res)
	require.Len(t, res.Accepted, 1)
	require.Equal(t, "all-hands", res.Accepted[0].Recipient)
	require.Len(t, res.Rejected, 1)
	require.Equal(t, 404, res.Rejected[0].Code)
	require.Equal(t, 4, h.depth(h.queue("wecom")+".normal"), "shop's one, everyone's two, and the batch's one")
}
