package console_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/logging"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// No dead-letter page (overview, list, detail, purge) and no lookup page
// shows a batch's recipients, a mention, a callbackUrl or a variable in
// full, nor a recipient quoted in an error text: for a WeCom batch with
// mentions and a mail, both with a callbackUrl. What routes a
// message (task ids, template, tenant) is still shown.
func TestDeadLetterPagesMaskEveryRecipient(t *testing.T) {
	h := setup(t)
	ctx := t.Context()
	id := strings.ToLower(testenv.ID())
	wecom, err := h.stack.Model.Channel(topology.WeCom)
	require.NoError(t, err)

	users := []string{"zhang.wei." + id, "li.na." + id}
	mentions := []string{"wang.fang." + id, "@all"}
	hook := "https://cb-" + id + ".example.com/hook?token=tok" + id
	phone := "13800138" + "123"
	var wecomID string
	members := h.stack.WeCom("on-call", users, func(m *envelope.Message) {
		wecomID = m.TaskID
		m.Mentions, m.CallbackURL, m.Tenant = mentions, hook, "shopA"
		m.Variables["phone"] = phone
	})
	h.rejectHeadOf(t, wecom, wecomID, 1)

	// Mail has no batch message (a batch is one message per recipient).
	mails := []string{"a-" + id + "@example.com", "b-" + id + "@example.com"}
	mailID := h.stack.Notice(topology.Mail, mails[1], "mail", func(m *envelope.Message) {
		m.CallbackURL, m.Tenant = hook, "shopA"
	})
	h.rejectHead(t, mailID, 1)
	// An error text that quotes a recipient, as a provider's may: on the
	// mail's record (read by the dead-letter pages) and a batch member's
	// (the lookup).
	quoted := "550 mailbox " + mails[0] + " unavailable; sms to +86 " + phone + " refused; POST " + hook + ": 500"
	for _, task := range []string{mailID, members[0]} {
		_, err = h.stack.Status.Update(ctx, task, status.Update{Status: status.Failed, LastError: &quoted})
		require.NoError(t, err)
	}

	secrets := append(append(append([]string{hook, "cb-" + id + ".example.com", "tok" + id, phone}, users...), mentions[0]), mails...)
	c := h.client(t, true)
	pages := map[string][]string{
		"/console/dlq":                          nil,
		"/console/dlq/" + wecom.DeadLetterQueue: {wecomID},
		"/console/dlq/" + wecom.DeadLetterQueue + "/message/" + wecomID: {members[0], members[1], "&#34;recipients&#34;", "&#34;mentions&#34;",
			"&#34;callbackUrl&#34;", "&#34;template&#34;: &#34;notice&#34;", "&#34;tenant&#34;: &#34;shopA&#34;", logging.Mask(users[0]), logging.Mask(hook)},
		"/console/dlq/" + h.mail.DeadLetterQueue:                          {mailID, "550 mailbox " + logging.Mask(mails[0])},
		"/console/dlq/" + h.mail.DeadLetterQueue + "/message/" + mailID:   {mailID, logging.Mask(mails[1]), "550 mailbox " + logging.Mask(mails[0])},
		"/console/dlq/" + h.mail.DeadLetterQueue + "/purge?ids=" + mailID: {mailID},
		"/console/messages?taskId=" + members[0]:                          {members[0], "550 mailbox " + logging.Mask(mails[0])},
		"/console/messages?batchId=" + wecomID:                            {members[1]},
	}
	for path, want := range pages {
		t.Run(path, func(t *testing.T) {
			resp, err := c.Get(h.http.URL + path)
			require.NoError(t, err)
			page := readBody(t, resp)
			require.Equal(t, http.StatusOK, resp.StatusCode, page)
			for _, s := range secrets {
				require.NotContains(t, page, s, "shown in full")
			}
			for _, w := range want {
				require.Contains(t, page, w)
			}
		})
	}
	require.Equal(t, 1, h.stack.Depth(wecom.DeadLetterQueue), "reading gave the dead letters back")
	require.Equal(t, 1, h.stack.Depth(h.mail.DeadLetterQueue))
}
