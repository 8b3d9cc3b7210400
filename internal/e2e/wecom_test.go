package e2e

import (
	"fmt"
	"strconv"
	"strings"
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
	_, c := s.api("WECOM_ROBOTS=ops") // the API knows the robot's name, not its key
	s.consumer("c1", weComEnv(srv)...)
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
	// A single normal message may wait WECOM_MERGE_WINDOW for others with
	// its content: it is sent, just not necessarily before the batch.
	testenv.WaitFor(t, 10*time.Second, "the single message sent", func() bool {
		msg, err := c.GetMessage(ctx, one.TaskID)
		require.NoError(t, err)
		return msg.Status == client.Status("sent")
	})
	require.Len(t, srv.ReceivedBy("alice"), 1)
	require.Len(t, srv.ReceivedBy("user07"), 1)
	require.Equal(t, 2, srv.SendCalls(), "one call for the single message, one for the batch")
	require.Equal(t, 1, srv.TokenFetches())
	testenv.WaitFor(t, 10*time.Second, "the robot post", func() bool { return len(srv.RobotPosts()) == 1 })
	require.Contains(t, srv.RobotPosts()[0].Content, "<@alice>")
}

func weComEnv(srv *wecomtest.Server) []string {
	return []string{"CHANNELS=mail,sms,wecom", "WECOM_API_BASE=" + srv.URL, "WECOM_CORP_ID=" + wecomtest.CorpID,
		"WECOM_CORP_SECRET=" + wecomtest.CorpSecret, "WECOM_AGENT_ID=" + strconv.Itoa(wecomtest.AgentID), "WECOM_ROBOTS=ops=" + wecomtest.RobotKey}
}

func sendWeCom(t *testing.T, c *client.Client, prefix string, n int) []string {
	t.Helper()
	ctx := testenv.Context(t, 30*time.Second)
	var ids []string
	for i := range n {
		res, err := c.SendMessage(ctx, client.SendRequest{MessageType: client.MessageWeCom, TemplateCode: "notice", Recipient: fmt.Sprintf("u%02d", i),
			Variables: map[string]string{"title": prefix, "content": fmt.Sprint(i)}})
		require.NoError(t, err)
		ids = append(ids, res.TaskID)
	}
	return ids
}

func waitSent(t *testing.T, c *client.Client, ids []string) {
	t.Helper()
	ctx := testenv.Context(t, 30*time.Second)
	for _, id := range ids {
		testenv.WaitFor(t, 20*time.Second, "sent "+id, func() bool {
			m, err := c.GetMessage(ctx, id)
			require.NoError(t, err)
			return m.Status == client.Status("sent")
		})
	}
}

// Two consumer processes share one access token through Redis: 50
// messages, one gettoken; WeCom then expires it early, and the next 50
// cause one refresh between them, with nothing lost.
func TestTwoConsumerProcessesFetchTheWeComTokenOnce(t *testing.T) {
	s := newSystem(t)
	srv := wecomtest.New(t)
	_, c := s.api()
	s.consumer("c1", weComEnv(srv)...)
	s.consumer("c2", weComEnv(srv)...)
	waitSent(t, c, sendWeCom(t, c, "first", 50))
	require.Equal(t, 1, srv.TokenFetches())
	owners := map[string]bool{}
	keys, err := s.redis.Client.Keys(t.Context(), s.redis.Prefix+"wecom:sent:*").Result()
	require.NoError(t, err)
	for _, k := range keys {
		v, err := s.redis.Client.Get(t.Context(), k).Result()
		require.NoError(t, err)
		owners[strings.Split(v, ":")[1]] = true // sent:<owner>:<ms>
	}
	require.Equal(t, map[string]bool{"c1": true, "c2": true}, owners, "both processes sent")
	srv.ExpireTokens()
	waitSent(t, c, sendWeCom(t, c, "second", 50))
	require.Equal(t, 2, srv.TokenFetches())
	for i := range 50 {
		require.Len(t, srv.ReceivedBy(fmt.Sprintf("u%02d", i)), 2)
	}
}
