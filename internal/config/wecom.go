package config

import (
	"slices"
	"strconv"
	"time"

	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/provider/wecom"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// loadAPIRobots reads the consumer's WECOM_ROBOTS for the API, which only
// checks who may post to a robot: the same value works, and the keys may be
// left out (name=@tenant+tenant, or name for every tenant).
func loadAPIRobots(l *envconf.Loader) map[string][]string {
	s := l.Secret("WECOM_ROBOTS", "", "WeCom group robots tenants may post to (WECOM_ROBOT messages): the consumer's value, name=KEY or name=KEY@tenant+tenant, comma-separated; here the KEY may be left out (name=@tenant+tenant, or name for every tenant). Another tenant's robot, or one not listed, is 404")
	list, err := wecom.ParseRobotList(s, false)
	if err != nil {
		l.Fail("WECOM_ROBOTS", "", "%v", err)
		return nil
	}
	out := make(map[string][]string, len(list))
	for _, r := range list {
		out[r.Name] = r.Tenants
	}
	return out
}

// loadWeCom reads the WeCom settings; they are checked only when the
// consumer consumes the wecom channel.
func loadWeCom(l *envconf.Loader, channels []string) wecom.Config {
	c := wecom.Config{
		CorpID:     l.String("WECOM_CORP_ID", "", "WeCom: corpid of the application messages are sent from"),
		CorpSecret: l.Secret("WECOM_CORP_SECRET", "", "WeCom: the application's secret (corpsecret)"),
		APIBase:    l.URL("WECOM_API_BASE", wecom.DefaultAPIBase, []string{"http", "https"}, "WeCom: server API base URL (any http(s) base, so a test server can stand in)"),
		DuplicateCheckInterval: time.Duration(l.Int("WECOM_DUPLICATE_CHECK_INTERVAL", int(wecom.DefaultDuplicateCheckInterval/time.Second), 1, 14400,
			"WeCom: duplicate_check_interval in seconds; WeCom delivers the same request once within it, which absorbs the one resend a consumer crash can cause")) * time.Second,
	}
	agent := l.String("WECOM_AGENT_ID", "", "WeCom: agentid of the application")
	if agent != "" {
		n, err := strconv.ParseInt(agent, 10, 64)
		if err != nil || n <= 0 {
			l.Fail("WECOM_AGENT_ID", agent, "must be a positive integer")
		}
		c.AgentID = n
	}
	robots := l.Secret("WECOM_ROBOTS", "", "WeCom group robots for WECOM_ROBOT messages: name=KEY or name=KEY@tenant+tenant, comma-separated (KEY: the key of the robot's webhook URL; tenants listed: only they may post to it, else every tenant); the API needs the same names and tenants")
	var err error
	if c.Robots, c.RobotTenants, err = wecom.ParseRobots(robots); err != nil {
		l.Fail("WECOM_ROBOTS", "", "%v", err)
	}
	c.Accounts = loadAccountList(l)
	if slices.Contains(channels, topology.WeCom) {
		if err := c.Validate(); err != nil {
			l.Fail("WECOM_CORP_ID", c.CorpID, "%v", err)
		}
	}
	return c
}
