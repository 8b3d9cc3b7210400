package config

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/msgpulse/msgpulse/internal/envconf"
)

// Docker cannot run on the machines this is developed on, so this checks
// the compose file's structure: the services and images, the health checks
// and start order, that every variable a service sets is one its program
// reads, and that every mounted file exists.
type compose struct {
	Services map[string]struct {
		Profiles    []string          `yaml:"profiles"`
		Image       string            `yaml:"image"`
		Build       any               `yaml:"build"`
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		Volumes     []string          `yaml:"volumes"`
		DependsOn   map[string]struct {
			Condition string `yaml:"condition"`
		} `yaml:"depends_on"`
		Healthcheck *struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
		Deploy struct {
			Replicas int `yaml:"replicas"`
		} `yaml:"deploy"`
	} `yaml:"services"`
}

func root(parts ...string) string { return filepath.Join(append([]string{"..", ".."}, parts...)...) }

func TestComposeFile(t *testing.T) {
	data, err := os.ReadFile(root("docker-compose.yml"))
	require.NoError(t, err)
	var c compose
	require.NoError(t, yaml.Unmarshal(data, &c))

	var names, cluster []string
	for n, s := range c.Services {
		if len(s.Profiles) == 0 {
			names = append(names, n)
		} else {
			require.Equal(t, []string{"cluster"}, s.Profiles, n)
			cluster = append(cluster, n)
		}
	}
	sort.Strings(names)
	require.Equal(t, []string{"api", "consumer", "mailpit", "rabbitmq", "redis", "topology"}, names)
	sort.Strings(cluster)
	require.Equal(t, []string{"api-cluster", "consumer-cluster", "redis-cluster-create", "redis-node-1", "redis-node-2", "redis-node-3",
		"redis-node-4", "redis-node-5", "redis-node-6", "redis-node-7", "redis-node-8", "redis-node-9", "rmq1", "rmq2", "rmq3", "topology-cluster"}, cluster)
	// RabbitMQ of a series make test runs (4.0.5 and 3.10.8, scripts/test.sh),
	// so a developer's stack behaves as the tests saw it.
	for _, n := range []string{"rabbitmq", "rmq1", "rmq2", "rmq3"} {
		require.Equal(t, "rabbitmq:4.0-management", c.Services[n].Image, n)
	}
	require.True(t, strings.HasPrefix(c.Services["redis"].Image, "redis:"))
	require.True(t, strings.HasPrefix(c.Services["mailpit"].Image, "axllent/mailpit"))
	require.Equal(t, 2, c.Services["consumer"].Deploy.Replicas)
	_, err = os.Stat(root("Dockerfile"))
	require.NoError(t, err)

	// Each app service runs a program whose config reads what it is given.
	loaders := map[string]*envconf.Loader{}
	_, loaders["api"] = LoadAPI(envconf.FromMap(map[string]string{"API_KEYS": "k:0123456789abcdefghij"}))
	_, loaders["consumer"] = LoadConsumer(envconf.FromMap(nil))
	_, loaders["topology"] = LoadTopology(envconf.FromMap(nil))
	// The cluster profile runs the same programs under other names.
	for _, svc := range []string{"api", "consumer", "topology"} {
		loaders[svc+"-cluster"] = loaders[svc]
	}
	for svc, l := range loaders {
		s := c.Services[svc]
		prog := strings.TrimSuffix(svc, "-cluster")
		require.NotNil(t, s.Build, "%s is built from the Dockerfile", svc)
		require.Equal(t, prog, s.Command[0], "%s runs its own command", svc)
		known := map[string]bool{}
		for _, n := range l.Names() {
			known[n] = true
		}
		require.NotEmpty(t, s.Environment, svc)
		for name := range s.Environment {
			require.True(t, known[name], "%s sets %s, which %s does not read", svc, name, svc)
		}
		// The values parse: what compose sets is a valid configuration.
		env := map[string]string{}
		for k, v := range s.Environment {
			env[k] = v
		}
		switch prog {
		case "api":
			_, l = LoadAPI(envconf.FromMap(env))
		case "consumer":
			_, l = LoadConsumer(envconf.FromMap(env))
		case "topology":
			_, l = LoadTopology(envconf.FromMap(env))
		}
		require.NoError(t, l.Err(), svc)
	}

	// Start order: the broker, then the topology job, then the programs.
	require.Equal(t, "service_healthy", c.Services["topology"].DependsOn["rabbitmq"].Condition)
	for _, svc := range []string{"api", "consumer"} {
		require.Equal(t, "service_completed_successfully", c.Services[svc].DependsOn["topology"].Condition, svc)
		require.Equal(t, "service_healthy", c.Services[svc].DependsOn["redis"].Condition, svc)
	}
	for _, svc := range []string{"rabbitmq", "redis", "mailpit", "api", "consumer"} {
		require.NotNil(t, c.Services[svc].Healthcheck, "%s has a health check", svc)
	}
	require.Equal(t, "mailpit", c.Services["consumer"].Environment["SMTP_HOST"])

	// Mounted files exist, and the broker config loads the mounted definitions.
	for svc, s := range c.Services {
		for _, v := range s.Volumes {
			src, dst, _ := strings.Cut(v, ":")
			if strings.HasPrefix(src, "./") {
				_, err := os.Stat(root(src))
				require.NoError(t, err, "%s mounts %s", svc, src)
			}
			_ = dst
		}
	}
	conf, err := os.ReadFile(root("rabbitmq", "rabbitmq.conf"))
	require.NoError(t, err)
	require.Contains(t, string(conf), "load_definitions = /etc/rabbitmq/definitions.json")
	require.Contains(t, strings.Join(c.Services["rabbitmq"].Volumes, " "), "./rabbitmq/definitions.json:/etc/rabbitmq/definitions.json")
}

// docs/commands.md (make docs) must name every variable every program reads.
func TestCommandDocsNameEveryVariable(t *testing.T) {
	data, err := os.ReadFile(root("docs", "commands.md"))
	require.NoError(t, err)
	docs := string(data)
	loaders := map[string]*envconf.Loader{}
	_, loaders["api"] = LoadAPI(envconf.FromMap(nil))
	_, loaders["consumer"] = LoadConsumer(envconf.FromMap(nil))
	_, loaders["topology"] = LoadTopology(envconf.FromMap(nil))
	_, loaders["dlq"] = LoadDLQ(envconf.FromMap(nil))
	_, loaders["mailcatcher"] = LoadMailcatcher(envconf.FromMap(nil))
	for prog, l := range loaders {
		section := docs[strings.Index(docs, "## "+prog):]
		for _, name := range l.Names() {
			require.Contains(t, section, "  "+name+" ", "%s reads %s, missing from docs/commands.md: run `make docs`", prog, name)
		}
	}
}
