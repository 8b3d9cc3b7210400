package testenv

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/msgpulse/msgpulse/internal/rdb"
)

// CommandHook is a go-redis hook that calls its function with every
// command a client sends, alone or in a pipeline, before it goes out: to
// count or look at what a test's code sends. A non-nil error fails the
// command, and the whole pipeline it is in, as an unreachable Redis would:
// nothing is sent, and every command carries the error.
type CommandHook func(cmd redis.Cmder) error

// DialHook leaves dialing alone.
func (h CommandHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook sees a command sent alone.
func (h CommandHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := h(cmd); err != nil {
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook sees every command of a pipeline.
func (h CommandHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if err := h(cmd); err != nil {
				for _, c := range cmds {
					c.SetErr(err)
				}
				return err
			}
		}
		return next(ctx, cmds)
	}
}

// AddHook adds h to r's client: on a Redis Cluster to the cluster client,
// which runs it for the commands of every node.
func (r *Redis) AddHook(h redis.Hook) {
	if cc, ok := rdb.AsCluster(r.Client); ok {
		cc.AddHook(h)
		return
	}
	r.Client.AddHook(h)
}

// IsScript reports whether cmd runs a script (EVAL or EVALSHA), and if so
// its keys and arguments.
func IsScript(cmd redis.Cmder) (keys []string, args []any, ok bool) {
	if n := cmd.Name(); n != "evalsha" && n != "eval" {
		return nil, nil, false
	}
	a := cmd.Args() // eval(sha), script, numkeys, keys…, args…
	nk, _ := a[2].(int)
	keys = make([]string, 0, nk)
	for _, k := range a[3 : 3+nk] {
		s, _ := k.(string)
		keys = append(keys, s)
	}
	return keys, a[3+nk:], true
}

// CountScripts counts the scripts r's client sends from now on, alone or
// pipelined.
func (r *Redis) CountScripts() *atomic.Int64 {
	var n atomic.Int64
	r.AddHook(CommandHook(func(cmd redis.Cmder) error {
		if _, _, ok := IsScript(cmd); ok {
			n.Add(1)
		}
		return nil
	}))
	return &n
}
