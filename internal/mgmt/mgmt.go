package mgmt

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/redact"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// Client talks to a broker's management API. Given several nodes of one
// cluster, it sticks to the one that last answered and moves on to the next
// when that one is unreachable: every node serves the whole cluster's state.
type Client struct {
	bases []*url.URL
	cur   atomic.Int32
	user  string
	pass  string
	http  *http.Client
}

// ErrNotFound is returned for a missing vhost, queue or exchange.
var ErrNotFound = errors.New("not found")

// ErrUnreachable wraps transport failures (plugin off, broker down).
var ErrUnreachable = errors.New("management API unreachable")

// New parses a management URL such as http://guest:guest@127.0.0.1:15672,
// or a comma-separated list of them, one per node. Credentials come from
// the first URL that has them.
func New(rawURL string, timeout time.Duration) (*Client, error) {
	c := &Client{http: &http.Client{Timeout: timeout}}
	for _, raw := range envconf.SplitURLs(rawURL) {
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("management URL %q: not an absolute URL", redact.Passwords(raw))
		}
		if u.User != nil && c.user == "" {
			c.user = u.User.Username()
			c.pass, _ = u.User.Password()
		}
		u.User = nil
		u.Path = strings.TrimRight(u.Path, "/")
		c.bases = append(c.bases, u)
	}
	if len(c.bases) == 0 {
		return nil, errors.New("management URL: empty")
	}
	c.cur.Store(int32(rand.IntN(len(c.bases)))) //nolint:gosec // spreading load, not a secret
	return c, nil
}

// do sends the request to the current node and, while nodes are
// unreachable, to each of the others in turn.
func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	var payload []byte
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		payload = b
	}
	start := int(c.cur.Load())
	var errs []error
	for i := range c.bases {
		n := (start + i) % len(c.bases)
		resp, err := c.send(ctx, c.bases[n], method, path, payload) //nolint:bodyclose // c.read closes it
		if err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		c.cur.Store(int32(n)) //nolint:gosec // a handful of nodes
		return c.read(resp, method, path, out)
	}
	return errors.Join(errs...)
}

func (c *Client) send(ctx context.Context, base *url.URL, method, path string, payload []byte) (*http.Response, error) {
	var rd io.Reader
	if payload != nil {
		rd = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, base.String()+path, rd)
	if err != nil {
		return nil, err
	}
	req.SetBasicAuth(c.user, c.pass)
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w at %s: %w", ErrUnreachable, base.Host, err)
	}
	return resp, nil
}

func (c *Client) read(resp *http.Response, method, path string, out any) error {
	defer func() { _ = resp.Body.Close() }()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%s %s: %w", method, path, ErrNotFound)
	case resp.StatusCode == http.StatusUnauthorized:
		return fmt.Errorf("%s %s: management API refused the credentials (401)", method, path)
	case resp.StatusCode >= 300:
		return fmt.Errorf("%s %s: management API answered %d: %s", method, path, resp.StatusCode, strings.TrimSpace(string(data)))
	}
	if out == nil || len(data) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return dec.Decode(out)
}

// Overview is the part of /api/overview we use.
type Overview struct {
	RabbitMQVersion   string `json:"rabbitmq_version"`
	ManagementVersion string `json:"management_version"`
	ClusterName       string `json:"cluster_name"`
}

// Overview returns the broker's version and cluster name.
func (c *Client) Overview(ctx context.Context) (Overview, error) {
	var o Overview
	err := c.do(ctx, http.MethodGet, "/api/overview", nil, &o)
	return o, err
}

// QueueInfo is a queue as the management API lists it.
type QueueInfo struct {
	Name                   string         `json:"name"`
	VHost                  string         `json:"vhost"`
	Type                   string         `json:"type"`
	Durable                bool           `json:"durable"`
	AutoDelete             bool           `json:"auto_delete"`
	Exclusive              bool           `json:"exclusive"`
	Arguments              map[string]any `json:"arguments"`
	Messages               int64          `json:"messages"`
	MessagesReady          int64          `json:"messages_ready"`
	MessagesUnacknowledged int64          `json:"messages_unacknowledged"`
	Consumers              int64          `json:"consumers"`
	// MessageStats are the broker's recent rates; absent on a queue that
	// has seen no traffic (and when statistics are disabled).
	MessageStats *MessageStats `json:"message_stats,omitempty"`
	// Node is the node a classic queue lives on, or a quorum queue's
	// leader (also in Leader) at the time of the call.
	Node   string `json:"node"`
	Leader string `json:"leader"`
	// HeadMessageTimestamp is the timestamp property (unix seconds) of the
	// message at the head of the queue; absent for an empty queue, and for
	// queue types that do not report it (quorum).
	HeadMessageTimestamp *int64 `json:"head_message_timestamp,omitempty"`
}

// MessageStats are a queue's rates, messages per second, averaged by the
// broker over its statistics interval (5 s by default).
type MessageStats struct {
	Publish    Rate `json:"publish_details"`
	DeliverGet Rate `json:"deliver_get_details"`
	Ack        Rate `json:"ack_details"`
}

// Rate is one rate of MessageStats.
type Rate struct {
	Rate float64 `json:"rate"`
}

// VHostOf is the vhost an AMQP URL names ("/" when it names none), so the
// management API is asked about the same vhost as the AMQP connection.
func VHostOf(amqpURL string) string {
	// A cluster's list names one vhost on every node: the first URL's.
	if urls := envconf.SplitURLs(amqpURL); len(urls) > 0 {
		amqpURL = urls[0]
	}
	u, err := url.Parse(amqpURL)
	if err != nil || u.Path == "" || u.Path == "/" {
		return "/"
	}
	v, err := url.PathUnescape(strings.TrimPrefix(u.EscapedPath(), "/"))
	if err != nil {
		return "/"
	}
	return v
}

// ExchangeInfo is an exchange as the management API lists it.
type ExchangeInfo struct {
	Name       string         `json:"name"`
	Type       string         `json:"type"`
	Durable    bool           `json:"durable"`
	AutoDelete bool           `json:"auto_delete"`
	Internal   bool           `json:"internal"`
	Arguments  map[string]any `json:"arguments"`
}

// BindingInfo is a binding as the management API lists it.
type BindingInfo struct {
	Source          string `json:"source"`
	Destination     string `json:"destination"`
	DestinationType string `json:"destination_type"`
	RoutingKey      string `json:"routing_key"`
}

func vh(vhost string) string { return url.PathEscape(vhost) }

// Queues lists the queues of a vhost.
func (c *Client) Queues(ctx context.Context, vhost string) ([]QueueInfo, error) {
	var qs []QueueInfo
	err := c.do(ctx, http.MethodGet, "/api/queues/"+vh(vhost), nil, &qs)
	return qs, err
}

// HeadTimestamps returns, per queue of the vhost, the timestamp of its
// oldest (head) message, for the queues whose type reports one.
func (c *Client) HeadTimestamps(ctx context.Context, vhost string) (map[string]time.Time, error) {
	var qs []QueueInfo
	if err := c.do(ctx, http.MethodGet, "/api/queues/"+vh(vhost)+"?columns=name,head_message_timestamp", nil, &qs); err != nil {
		return nil, err
	}
	out := map[string]time.Time{}
	for _, q := range qs {
		if q.HeadMessageTimestamp != nil && *q.HeadMessageTimestamp > 0 {
			out[q.Name] = time.Unix(*q.HeadMessageTimestamp, 0)
		}
	}
	return out, nil
}

// Queue returns one queue.
func (c *Client) Queue(ctx context.Context, vhost, name string) (QueueInfo, error) {
	var q QueueInfo
	err := c.do(ctx, http.MethodGet, "/api/queues/"+vh(vhost)+"/"+url.PathEscape(name), nil, &q)
	return q, err
}

// Exchanges lists the exchanges of a vhost.
func (c *Client) Exchanges(ctx context.Context, vhost string) ([]ExchangeInfo, error) {
	var es []ExchangeInfo
	err := c.do(ctx, http.MethodGet, "/api/exchanges/"+vh(vhost), nil, &es)
	return es, err
}

// Bindings lists the bindings of a vhost.
func (c *Client) Bindings(ctx context.Context, vhost string) ([]BindingInfo, error) {
	var bs []BindingInfo
	err := c.do(ctx, http.MethodGet, "/api/bindings/"+vh(vhost), nil, &bs)
	return bs, err
}

// State reads a vhost's exchanges, queues and bindings into the shape the
// topology diff compares. Server-named and built-in (amq.*) resources are
// left out: the model never names them.
func (c *Client) State(ctx context.Context, vhost string) (topology.State, error) {
	s := topology.State{Exchanges: map[string]topology.ObservedExchange{}, Queues: map[string]topology.ObservedQueue{}}
	es, err := c.Exchanges(ctx, vhost)
	if err != nil {
		return s, err
	}
	for _, e := range es {
		if e.Name == "" || strings.HasPrefix(e.Name, "amq.") {
			continue
		}
		s.Exchanges[e.Name] = topology.ObservedExchange{Kind: e.Type, Durable: e.Durable, AutoDelete: e.AutoDelete, Internal: e.Internal, Args: e.Arguments}
	}
	qs, err := c.Queues(ctx, vhost)
	if err != nil {
		return s, err
	}
	for _, q := range qs {
		s.Queues[q.Name] = topology.ObservedQueue{Type: topology.QueueType(q.Type), Durable: q.Durable, AutoDelete: q.AutoDelete, Exclusive: q.Exclusive, Args: q.Arguments}
	}
	bs, err := c.Bindings(ctx, vhost)
	if err != nil {
		return s, err
	}
	for _, b := range bs {
		if b.Source == "" { // the default exchange's implicit bindings
			continue
		}
		s.Bindings = append(s.Bindings, topology.Binding{Source: b.Source, Destination: b.Destination, DestinationType: b.DestinationType, RoutingKey: b.RoutingKey})
	}
	return s, nil
}

// CreateVHost creates a vhost and grants user full permissions on it.
func (c *Client) CreateVHost(ctx context.Context, vhost, user string) error {
	return c.CreateVHostOfType(ctx, vhost, user, "")
}

// CreateVHostOfType is CreateVHost with the vhost's default queue type
// (classic, quorum, stream; "" leaves the broker's): the type a declare
// without x-queue-type gets, on RabbitMQ 3.10 and 4.x alike.
// "defaultqueuetype" is the field both accept.
func (c *Client) CreateVHostOfType(ctx context.Context, vhost, user, queueType string) error {
	body := map[string]any{}
	if queueType != "" {
		body["defaultqueuetype"] = queueType
	}
	if err := c.do(ctx, http.MethodPut, "/api/vhosts/"+vh(vhost), body, nil); err != nil {
		return err
	}
	perm := map[string]string{"configure": ".*", "write": ".*", "read": ".*"}
	return c.do(ctx, http.MethodPut, "/api/permissions/"+vh(vhost)+"/"+url.PathEscape(user), perm, nil)
}

// Policy is a RabbitMQ policy: Definition applies to the queues (or
// exchanges, see ApplyTo) of its vhost whose names match Pattern.
type Policy struct {
	Pattern    string         `json:"pattern"`
	Definition map[string]any `json:"definition"`
	ApplyTo    string         `json:"apply-to,omitempty"` // queues, exchanges or all (default)
	Priority   int            `json:"priority"`
}

// SetPolicy creates or replaces the policy name of vhost.
func (c *Client) SetPolicy(ctx context.Context, vhost, name string, p Policy) error {
	return c.do(ctx, http.MethodPut, "/api/policies/"+vh(vhost)+"/"+url.PathEscape(name), p, nil)
}

// DeletePolicy removes the policy name of vhost; a missing one is not an
// error.
func (c *Client) DeletePolicy(ctx context.Context, vhost, name string) error {
	err := c.do(ctx, http.MethodDelete, "/api/policies/"+vh(vhost)+"/"+url.PathEscape(name), nil, nil)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// DeleteVHost deletes a vhost and everything in it.
func (c *Client) DeleteVHost(ctx context.Context, vhost string) error {
	err := c.do(ctx, http.MethodDelete, "/api/vhosts/"+vh(vhost), nil, nil)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// User returns the user name the client authenticates as.
func (c *Client) User() string { return c.user }

// Host returns the host:port of the node the client talks to now.
func (c *Client) Host() string { return c.bases[c.cur.Load()].Host }

// VHosts lists the broker's vhost names.
func (c *Client) VHosts(ctx context.Context) ([]string, error) {
	var vs []struct {
		Name string `json:"name"`
	}
	if err := c.do(ctx, http.MethodGet, "/api/vhosts", nil, &vs); err != nil {
		return nil, err
	}
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.Name
	}
	return out, nil
}

// Node is a broker node as /api/nodes lists it.
type Node struct {
	Name string `json:"name"`
	// OSPid is the node's operating-system process id, on the machine the
	// node runs on (the load generator reads its CPU time from /proc).
	OSPid   string `json:"os_pid"`
	Running bool   `json:"running"`
}

// Nodes lists the cluster's nodes.
func (c *Client) Nodes(ctx context.Context) ([]Node, error) {
	var ns []Node
	err := c.do(ctx, http.MethodGet, "/api/nodes?columns=name,os_pid,running", nil, &ns)
	return ns, err
}
