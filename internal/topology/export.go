package topology

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
)

// DevUser is a broker user to include in exported definitions, for local
// stacks only: its salt is derived from the name so the export is stable.
type DevUser struct {
	Name     string
	Password string
	Tags     []string
}

// ExportOptions shape the definitions document.
type ExportOptions struct {
	VHost string    // default "/"
	Users []DevUser // optional: users with full permissions on VHost
}

type defs struct {
	Users       []defUser       `json:"users,omitempty"`
	VHosts      []defVHost      `json:"vhosts"`
	Permissions []defPermission `json:"permissions,omitempty"`
	Queues      []defQueue      `json:"queues"`
	Exchanges   []defExchange   `json:"exchanges"`
	Bindings    []defBinding    `json:"bindings"`
}

type defUser struct {
	Name             string `json:"name"`
	PasswordHash     string `json:"password_hash"`
	HashingAlgorithm string `json:"hashing_algorithm"`
	Tags             string `json:"tags"`
}

type defVHost struct {
	Name string `json:"name"`
}

type defPermission struct {
	User      string `json:"user"`
	VHost     string `json:"vhost"`
	Configure string `json:"configure"`
	Write     string `json:"write"`
	Read      string `json:"read"`
}

type defQueue struct {
	Name       string         `json:"name"`
	VHost      string         `json:"vhost"`
	Durable    bool           `json:"durable"`
	AutoDelete bool           `json:"auto_delete"`
	Arguments  map[string]any `json:"arguments"`
}

type defExchange struct {
	Name       string         `json:"name"`
	VHost      string         `json:"vhost"`
	Type       string         `json:"type"`
	Durable    bool           `json:"durable"`
	AutoDelete bool           `json:"auto_delete"`
	Internal   bool           `json:"internal"`
	Arguments  map[string]any `json:"arguments"`
}

type defBinding struct {
	Source          string         `json:"source"`
	VHost           string         `json:"vhost"`
	Destination     string         `json:"destination"`
	DestinationType string         `json:"destination_type"`
	RoutingKey      string         `json:"routing_key"`
	Arguments       map[string]any `json:"arguments"`
}

// Export returns RabbitMQ definitions JSON (the format of
// `rabbitmqctl import_definitions` and `load_definitions`) for the model.
// The output is deterministic, so a committed copy can be checked for drift.
func Export(m *Model, opts ExportOptions) ([]byte, error) {
	vhost := opts.VHost
	if vhost == "" {
		vhost = "/"
	}
	d := defs{VHosts: []defVHost{{Name: vhost}}, Queues: []defQueue{}, Exchanges: []defExchange{}, Bindings: []defBinding{}}
	for _, u := range opts.Users {
		tags := ""
		for i, t := range u.Tags {
			if i > 0 {
				tags += ","
			}
			tags += t
		}
		d.Users = append(d.Users, defUser{Name: u.Name, PasswordHash: PasswordHash(u.Name, u.Password), HashingAlgorithm: "rabbit_password_hashing_sha256", Tags: tags})
		d.Permissions = append(d.Permissions, defPermission{User: u.Name, VHost: vhost, Configure: ".*", Write: ".*", Read: ".*"})
	}
	for _, q := range m.Queues {
		d.Queues = append(d.Queues, defQueue{Name: q.Name, VHost: vhost, Durable: q.Durable, Arguments: q.DeclareArgs()})
	}
	for _, e := range m.Exchanges {
		args := e.Args
		if args == nil {
			args = map[string]any{}
		}
		d.Exchanges = append(d.Exchanges, defExchange{Name: e.Name, VHost: vhost, Type: e.Kind, Durable: e.Durable, AutoDelete: e.AutoDelete, Internal: e.Internal, Arguments: args})
	}
	for _, b := range m.Bindings {
		d.Bindings = append(d.Bindings, defBinding{Source: b.Source, VHost: vhost, Destination: b.Destination, DestinationType: b.DestinationType, RoutingKey: b.RoutingKey, Arguments: map[string]any{}})
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(d); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// PasswordHash is RabbitMQ's rabbit_password_hashing_sha256 format:
// base64(salt ++ sha256(salt ++ password)), with a 4-byte salt.
func PasswordHash(user, password string) string {
	seed := sha256.Sum256([]byte("msgpulse-dev-salt:" + user))
	salt := seed[:4]
	h := sha256.Sum256(append(append([]byte{}, salt...), password...))
	return base64.StdEncoding.EncodeToString(append(append([]byte{}, salt...), h[:]...))
}
