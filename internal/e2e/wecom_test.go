package e2e

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/provider/wecom/wecomtest"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/pkg/client"
)

// The real binaries with CHANNELS=mail,sms,wecom: a WECOM message, a
// robot post and a batch through the API reach the WeCom test server, and
// the batch's counts say what happened to each recipient.
func TestWeComThroughTheAPI(t *testing.T) {
	s := newSystem(t)
	srv := wecomtest.New(t)
	srv.Unknown["ghost"] = true
	_, c := s.api()
	s.consumer("c1", "CHANNELS=mail,sms,wecom", "WECOM_API_BASE="+srv.URL, "WECOM_CORP_ID="+wecomtest.CorpID,
		"WECOM_CORP_SECRET="+wecomtest.CorpSecret, "WECOM_AGENT_ID="+strconv.Itoa(wecomtest.AgentID), "WECOM_ROBOTS=ops="+wecomtest.RobotKey)
	ctx := testenv.Context(t, 60*time.Second)
	vars := map[string]string{"title": "Deploy", "content": "v2 is live"}

	one, err := c.SendMessage(ctx, client.SendRequest{MessageType: client.MessageWeCom, TemplateCode: "notice", Recipient: "alice", Variables: vars})
	require.NoError(t, err)
	_, err = c.SendMessage(ctx, client.SendRequest{MessageType: client.MessageWeComRobot, TemplateCode: "notice", Recipient: "ops",
		Variables: vars, Mentions: []string{"alice"}})
	require.NoError(t, err)
	var to []string
	for i := range 30 {
		to = append(to, fmt.Sprintf("user%02d", i))
	}
	batch, err := c.SendBatch(ctx, client.BatchRequest{MessageType: client.MessageWeCom, TemplateCode: "notice", Recipients: append(to, "ghost"), Variables: vars})
	require.NoError(t, err)
	require.Len(t, batch.Accepted, 31)

	testenv.WaitFor(t, 20*time.Second, "the batch done", func() bool {
		b, err := c.GetBatch(ctx, batch.BatchID)
		require.NoError(t, err)
		return b.Counts["sent"] == 30 && b.Counts["failed"] == 1
	})
	msg, err := c.GetMessage(ctx, one.TaskID)
	require.NoError(t, err)
	require.Equal(t, client.Status("sent"), msg.Status)
	require.Len(t, srv.ReceivedBy("alice"), 1)
	require.Len(t, srv.ReceivedBy("user07"), 1)
	require.Equal(t, 2, srv.SendCalls(), "one call for the single message, one for the batch")
	require.Equal(t, 1, srv.TokenFetches())
	testenv.WaitFor(t, 10*time.Second, "the robot post", func() bool { return len(srv.RobotPosts()) == 1 })
	require.Contains(t, srv.RobotPosts()[0].Content, "<@alice>")
}
