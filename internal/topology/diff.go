package topology

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// ObservedExchange is an exchange as the broker reports it.
type ObservedExchange struct {
	Kind       string
	Durable    bool
	AutoDelete bool
	Internal   bool
	Args       map[string]any
}

// ObservedQueue is a queue as the broker reports it.
type ObservedQueue struct {
	Type       QueueType
	Durable    bool
	AutoDelete bool
	Exclusive  bool
	Args       map[string]any
}

// State is what exists on the broker (one vhost).
type State struct {
	Exchanges map[string]ObservedExchange
	Queues    map[string]ObservedQueue
	Bindings  []Binding
}

// ChangeKind classifies one line of a plan.
type ChangeKind string

// Change kinds.
const (
	Create   ChangeKind = "create"   // missing: declare will create it
	Conflict ChangeKind = "conflict" // exists but differs: declare refuses
	InSync   ChangeKind = "in-sync"  // exists as wanted
)

// Change is one resource's (or one argument's) difference.
type Change struct {
	Kind     ChangeKind
	Resource string // exchange, queue or binding
	Name     string
	Field    string // the argument or property that differs (Conflict only)
	Current  string
	Wanted   string
	Source   string // the setting that decides Wanted, when there is one
	// Type is, for a queue, the type the model declares it with (always
	// named: see Queue.DeclareArgs), which plan prints.
	Type QueueType
}

func (c Change) String() string {
	typ := ""
	if c.Type != "" {
		typ = " (" + string(c.Type) + ")"
	}
	switch c.Kind {
	case Create:
		return fmt.Sprintf("+ create %s %s%s", c.Resource, c.Name, typ)
	case Conflict:
		s := fmt.Sprintf("! conflict %s %s: %s is %s on the broker, the model wants %s", c.Resource, c.Name, c.Field, c.Current, c.Wanted)
		if c.Source != "" {
			s += " (set by " + c.Source + ")"
		}
		return s
	default:
		return fmt.Sprintf("= in sync %s %s%s", c.Resource, c.Name, typ)
	}
}

// Plan is the result of comparing the model with a broker's state.
type Plan struct{ Changes []Change }

// Count returns how many changes have kind k.
func (p Plan) Count(k ChangeKind) int {
	n := 0
	for _, c := range p.Changes {
		if c.Kind == k {
			n++
		}
	}
	return n
}

// Conflicts returns the conflicting changes.
func (p Plan) Conflicts() []Change {
	var out []Change
	for _, c := range p.Changes {
		if c.Kind == Conflict {
			out = append(out, c)
		}
	}
	return out
}

// InSync reports whether declare would change nothing.
func (p Plan) InSync() bool { return p.Count(Create) == 0 && p.Count(Conflict) == 0 }

// Diff compares the model with an observed state, resource by resource.
func Diff(m *Model, s State) Plan {
	var p Plan
	for _, e := range m.Exchanges {
		o, ok := s.Exchanges[e.Name]
		if !ok {
			p.Changes = append(p.Changes, Change{Kind: Create, Resource: "exchange", Name: e.Name})
			continue
		}
		n := len(p.Changes)
		p.prop("exchange", e.Name, "type", o.Kind, e.Kind, "")
		p.prop("exchange", e.Name, "durable", strconv.FormatBool(o.Durable), strconv.FormatBool(e.Durable), "")
		p.prop("exchange", e.Name, "auto_delete", strconv.FormatBool(o.AutoDelete), strconv.FormatBool(e.AutoDelete), "")
		p.prop("exchange", e.Name, "internal", strconv.FormatBool(o.Internal), strconv.FormatBool(e.Internal), "")
		p.args("exchange", e.Name, o.Args, e.Args, nil)
		if len(p.Changes) == n {
			p.Changes = append(p.Changes, Change{Kind: InSync, Resource: "exchange", Name: e.Name})
		}
	}
	for _, q := range m.Queues {
		o, ok := s.Queues[q.Name]
		if !ok {
			p.Changes = append(p.Changes, Change{Kind: Create, Resource: "queue", Name: q.Name, Type: q.Type})
			continue
		}
		n := len(p.Changes)
		ot := o.Type
		if ot == "" {
			ot = Classic
		}
		typeSource := "QUEUE_TYPE"
		if q.Role == RoleDeadLetterLog {
			typeSource = "" // a dead-letter log is classic whatever QUEUE_TYPE says
		}
		p.prop("queue", q.Name, ArgQueueType, string(ot), string(q.Type), typeSource)
		p.prop("queue", q.Name, "durable", strconv.FormatBool(o.Durable), strconv.FormatBool(q.Durable), "")
		p.prop("queue", q.Name, "auto_delete", strconv.FormatBool(o.AutoDelete), "false", "")
		p.prop("queue", q.Name, "exclusive", strconv.FormatBool(o.Exclusive), "false", "")
		p.args("queue", q.Name, o.Args, q.Args, q.Sources)
		if len(p.Changes) == n {
			p.Changes = append(p.Changes, Change{Kind: InSync, Resource: "queue", Name: q.Name, Type: q.Type})
		}
	}
	have := map[Binding]bool{}
	for _, b := range s.Bindings {
		have[b] = true
	}
	for _, b := range m.Bindings {
		name := fmt.Sprintf("%s -> %s %s [%s]", b.Source, b.DestinationType, b.Destination, b.RoutingKey)
		if have[b] {
			p.Changes = append(p.Changes, Change{Kind: InSync, Resource: "binding", Name: name})
		} else {
			p.Changes = append(p.Changes, Change{Kind: Create, Resource: "binding", Name: name})
		}
	}
	return p
}

func (p *Plan) prop(res, name, field, current, wanted, source string) {
	if current != wanted {
		p.Changes = append(p.Changes, Change{Kind: Conflict, Resource: res, Name: name, Field: field, Current: current, Wanted: wanted, Source: source})
	}
}

// args compares argument tables the way RabbitMQ's equivalence check does:
// an argument present on one side only is a difference too. x-queue-type is
// compared as the queue's type, not here, because a classic queue declared
// without it reports no such argument.
func (p *Plan) args(res, name string, observed, wanted map[string]any, sources map[string]string) {
	keys := map[string]bool{}
	for k := range observed {
		keys[k] = true
	}
	for k := range wanted {
		keys[k] = true
	}
	delete(keys, ArgQueueType)
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		cur, hasCur := observed[k]
		want, hasWant := wanted[k]
		cs, ws := "(none)", "(none)"
		if hasCur {
			cs = FormatValue(cur)
		}
		if hasWant {
			ws = FormatValue(want)
		}
		if cs != ws {
			p.Changes = append(p.Changes, Change{Kind: Conflict, Resource: res, Name: name, Field: k, Current: cs, Wanted: ws, Source: sources[k]})
		}
	}
}

// FormatValue prints an argument value the same way whichever decoder
// produced it (int64 from the model, float64 or json.Number from JSON).
func FormatValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "(none)"
	case string:
		return x
	case int:
		return strconv.Itoa(x)
	case int32:
		return strconv.FormatInt(int64(x), 10)
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		if x == float64(int64(x)) {
			return strconv.FormatInt(int64(x), 10)
		}
		return strconv.FormatFloat(x, 'f', -1, 64)
	case json.Number:
		return x.String()
	case bool:
		return strconv.FormatBool(x)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = FormatValue(e)
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	return fmt.Sprintf("%v", v)
}
