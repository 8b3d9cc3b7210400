package config

import (
	"strconv"
	"time"

	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// Common are the settings every program shares.
type Common struct {
	AMQPURL   string
	RedisURL  string
	RedisMode string
	// RedisAutoPipeline is how the Redis client batches commands (see
	// rdb.WithAutoPipeline).
	RedisAutoPipeline string
	RedisPrefix       string
	ManagementURL     string
	LogLevel          string
	LogFormat         string
}

// LogSettings returns LOG_LEVEL and LOG_FORMAT.
func (c Common) LogSettings() (level, format string) { return c.LogLevel, c.LogFormat }

func loadCommon(l *envconf.Loader) Common {
	return Common{
		AMQPURL:           l.URLs("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/", []string{"amqp", "amqps"}, "RabbitMQ connection URL (vhost is the path: /%2F for the default vhost); on a cluster, a comma-separated list, one URL per node: each connection starts at a random node and moves to the next when it is lost"),
		RedisURL:          l.URL("REDIS_URL", "redis://127.0.0.1:6379/0", []string{"redis", "rediss", "unix"}, "Redis connection URL"),
		RedisMode:         l.Enum("REDIS_MODE", rdb.Single, rdb.Modes, "how REDIS_URL is read: one Redis; a Redis Cluster (redis://h1:p1?addr=h2:p2&addr=h3:p3); or Sentinel (redis://s1:p1?addr=s2:p2&master_name=NAME)"),
		RedisAutoPipeline: l.Enum("REDIS_AUTOPIPELINE", rdb.AutoPipelineFullDuplex, rdb.AutoPipelineModes, "batch concurrent Redis commands into one write: off; on (go-redis auto-pipelining of single commands); full-duplex (the same on one connection that reads while it writes, pipelines included). docs/performance.md has the measurements"),
		RedisPrefix:       l.String("REDIS_PREFIX", "msgpulse:", "prefix of every Redis key msgpulse writes"),
		ManagementURL:     l.URLs("RABBITMQ_MANAGEMENT_URL", "http://guest:guest@127.0.0.1:15672", []string{"http", "https"}, "RabbitMQ management API URL (credentials in the URL); on a cluster, a comma-separated list: a node that does not answer is skipped"),
		LogLevel:          l.Enum("LOG_LEVEL", "info", []string{"debug", "info", "warn", "error"}, "log level"),
		LogFormat:         l.Enum("LOG_FORMAT", "json", []string{"json", "console"}, "log format"),
	}
}

func loadTopology(l *envconf.Loader) topology.Config {
	c := topology.DefaultConfig()
	c.QueueType = topology.QueueType(l.Enum("QUEUE_TYPE", string(topology.Classic), []string{"classic", "quorum"},
		"queue type for every queue; quorum replicates queues across a multi-node cluster"))
	c.QuorumInitialGroupSize = l.Int("QUORUM_INITIAL_GROUP_SIZE", 0, 0, 99,
		"with QUEUE_TYPE=quorum, how many nodes replicate each queue (0 = every node of the cluster; 3 or 5 in production, odd so that a majority survives)")
	for _, ch := range topology.Channels {
		p := topology.EnvPrefix(ch)
		cc := c.Channels[ch]
		cc.QueueTTL = l.Duration(p+"_QUEUE_TTL", cc.QueueTTL, 0, 7*24*time.Hour, "time a "+ch+" message may wait in queue."+ch+" before it is dead-lettered (0 = no TTL)")
		cc.MaxLength = l.Int(p+"_QUEUE_MAX_LENGTH", cc.MaxLength, 0, 100_000_000, "max messages in queue."+ch+"; the oldest is dead-lettered when full (0 = unbounded)")
		cc.MaxPriority = l.Int(p+"_QUEUE_MAX_PRIORITY", cc.MaxPriority, 0, 10, "declare queue."+ch+" with x-max-priority (0 = off; classic queues only): only to match a queue declared with it before, since msgpulse sets no message priority (levels are queues)")
		// Every channel gets the same levels, their variables named from the
		// channel (MAIL_NORMAL_QUEUE_MAX_LENGTH, SMS_LOW_QUEUE_MAX_LENGTH, …).
		levels := map[topology.Level]int{}
		for _, lv := range topology.NoticeLevels {
			levels[lv] = l.Int(topology.LevelMaxLengthEnv(ch, lv), topology.DefaultLevelMaxLength, 1, 100_000_000,
				"max messages in queue."+ch+"."+string(lv)+"; when full the API answers 503 (reject-publish), nothing is dropped")
		}
		cc.LevelMaxLength = levels
		c.Channels[ch] = cc
	}
	loadDelayTopology(l, &c.Delay)
	c.DeadLetterLog.MaxAge = l.Duration("DLQ_LOG_MAX_AGE", c.DeadLetterLog.MaxAge, time.Second, 49*24*time.Hour, // x-message-ttl fits in 32 bits of ms
		"how long each DLQ's log (a classic queue, queue.{ch}.dlq.log) keeps a copy of a dead letter; dlq stats/list/show read the log, so a dead letter older than this is counted but cannot be listed")
	c.DeadLetterLog.MaxBytes = int64(l.Int("DLQ_LOG_MAX_BYTES", int(c.DeadLetterLog.MaxBytes), 1<<20, 1<<42,
		"bound on the bodies in each DLQ's log; its oldest copies go first"))
	return c
}

// Topology configures cmd/topology.
type Topology struct {
	Common
	Model          topology.Config
	DeclareTimeout time.Duration
}

// LoadTopology reads cmd/topology's settings; check l.Err().
func LoadTopology(lookup func(string) (string, bool)) (Topology, *envconf.Loader) {
	l := envconf.New(lookup)
	c := Topology{Common: loadCommon(l), Model: loadTopology(l)}
	c.DeclareTimeout = l.Duration("DECLARE_TIMEOUT", 30*time.Second, time.Second, 10*time.Minute, "how long declare and plan may take in all")
	return c, l
}

// loadLeaveAfter reads AMQP_LEAVE_AFTER (the api's and the consumer's),
// as broker.Config.LeaveAfter: its "0 = never" is that field's negative
// (whose zero is the default).
func loadLeaveAfter(l *envconf.Loader) time.Duration {
	d := l.Duration("AMQP_LEAVE_AFTER", 5*time.Second, 0, 10*time.Minute, "leave a RabbitMQ node that has answered none of this process's publishes for this long, and reconnect through the next node of AMQP_URL (a node cut off from its peers keeps its connections but confirms nothing; RabbitMQ's own partition handling takes net_ticktime, 60s, or never comes for a shorter cut); 0 = never")
	if d == 0 {
		return -1
	}
	return d
}

// loadRedisWait reads REDIS_WAIT_REPLICAS and REDIS_WAIT_TIMEOUT, the
// fence that makes a write durable before the API answers 202 or the
// consumer calls a provider (rdb.Fence; docs/cluster.md, "Redis
// durability"). The replicas' default follows REDIS_MODE: a Sentinel set
// or a Cluster has replicas to wait for, one Redis has none.
func loadRedisWait(l *envconf.Loader, c Common, redisTimeout time.Duration) rdb.FenceConfig {
	def := 0
	if c.RedisMode == rdb.Sentinel || c.RedisMode == rdb.Cluster {
		def = 1
	}
	const name = "REDIS_WAIT_REPLICAS"
	raw := l.Computed(name, strconv.Itoa(def), "1 with REDIS_MODE sentinel or cluster, else 0",
		"replicas that must acknowledge the writes a caller is told about (the API's idempotency entry, status record and code before its 202; the consumer's claim before it calls a provider), by WAIT, at most as many as the master has online (0 = off, nothing is waited for); a write they do not acknowledge within REDIS_WAIT_TIMEOUT is a 503 (API) or a pause and retry (consumer), so an isolated master's writes are never acknowledged and then lost in a failover")
	n, err := strconv.Atoi(raw)
	if err != nil || n < 0 || n > 16 {
		l.Fail(name, raw, "must be an integer between 0 and 16")
		n = def
	}
	cfg := rdb.FenceConfig{Replicas: n, Prefix: c.RedisPrefix}
	cfg.Timeout = l.Duration("REDIS_WAIT_TIMEOUT", rdb.DefaultWaitTimeout, time.Millisecond, 10*time.Second,
		"longest wait for REDIS_WAIT_REPLICAS to acknowledge; a round that times out fails its callers. Must be below REDIS_TIMEOUT, which bounds the reply")
	if cfg.Timeout >= redisTimeout {
		l.Fail("REDIS_WAIT_TIMEOUT", envconf.FormatDuration(cfg.Timeout), "must be below REDIS_TIMEOUT (%s): WAIT's reply comes only after it", envconf.FormatDuration(redisTimeout))
	}
	return cfg
}
