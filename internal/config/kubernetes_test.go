package config

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// k8sObject is the part of a Kubernetes object the checks read.
type k8sObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec struct {
		Template struct {
			Spec struct {
				TerminationGracePeriodSeconds int `yaml:"terminationGracePeriodSeconds"`
				Containers                    []struct {
					Args []string `yaml:"args"`
					Env  []struct {
						Name      string `yaml:"name"`
						Value     string `yaml:"value"`
						ValueFrom any    `yaml:"valueFrom"`
					} `yaml:"env"`
					LivenessProbe  *probe `yaml:"livenessProbe"`
					ReadinessProbe *probe `yaml:"readinessProbe"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
		// ScaledObject
		ScaleTargetRef struct {
			Name string `yaml:"name"`
		} `yaml:"scaleTargetRef"`
		Triggers []struct {
			Type     string            `yaml:"type"`
			Metadata map[string]string `yaml:"metadata"`
		} `yaml:"triggers"`
	} `yaml:"spec"`
}

type probe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
	} `yaml:"httpGet"`
}

// TestKubernetesManifests checks deploy/kubernetes: every file parses,
// each Deployment runs one of our programs and sets only variables it
// reads, with values it accepts, probes /healthz and /readyz, and gives
// its pods longer to stop than the program's drain; the KEDA ScaledObject
// scales the consumer on queues the topology has.
func TestKubernetesManifests(t *testing.T) {
	files, err := filepath.Glob(root("deploy", "kubernetes", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var objs []k8sObject
	for _, f := range files {
		fh, err := os.Open(f)
		require.NoError(t, err)
		dec := yaml.NewDecoder(fh)
		for {
			var o k8sObject
			err := dec.Decode(&o)
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err, f)
			require.NotEmpty(t, o.Kind, f)
			objs = append(objs, o)
		}
		_ = fh.Close()
	}
	model, err := topology.Build(topology.DefaultConfig(), "")
	require.NoError(t, err)
	var queues []string
	for _, q := range model.Queues {
		queues = append(queues, q.Name)
	}
	deployments := map[string]string{} // name → program
	scaled := 0
	for _, o := range objs {
		switch o.Kind {
		case "Deployment":
			require.Len(t, o.Spec.Template.Spec.Containers, 1, o.Metadata.Name)
			c := o.Spec.Template.Spec.Containers[0]
			require.NotEmpty(t, c.Args, o.Metadata.Name)
			prog := c.Args[0]
			deployments[o.Metadata.Name] = prog
			env := map[string]string{}
			for _, e := range c.Env {
				require.NotContains(t, env, e.Name, "%s sets %s twice", o.Metadata.Name, e.Name)
				if e.ValueFrom != nil {
					env[e.Name] = "" // from a Secret: only the name is checked
					continue
				}
				env[e.Name] = e.Value
			}
			var l *envconf.Loader
			literal := map[string]string{}
			for k, v := range env {
				if v != "" {
					literal[k] = v
				}
			}
			var drain time.Duration
			switch prog {
			case "api":
				var c API
				c, l = LoadAPI(envconf.FromMap(mergeEnv(literal, map[string]string{"API_KEYS": "k:0123456789abcdefghij"})))
				drain = c.ShutdownTimeout
			case "consumer":
				var c Consumer
				c, l = LoadConsumer(envconf.FromMap(mergeEnv(literal, map[string]string{"WECOM_CORP_ID": "ww1", "WECOM_CORP_SECRET": "s", "WECOM_AGENT_ID": "1"})))
				drain = c.ShutdownTimeout
			default:
				t.Fatalf("%s runs %q, not a msgpulse program", o.Metadata.Name, prog)
			}
			require.NoError(t, l.Err(), "%s: the values it sets", o.Metadata.Name)
			for name := range env {
				require.True(t, slices.Contains(l.Names(), name), "%s sets %s, which %s does not read", o.Metadata.Name, name, prog)
			}
			require.NotNil(t, c.LivenessProbe, o.Metadata.Name)
			require.NotNil(t, c.ReadinessProbe, o.Metadata.Name)
			require.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path, o.Metadata.Name)
			require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path, o.Metadata.Name)
			grace := time.Duration(o.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
			require.Greater(t, grace, drain, "%s: terminationGracePeriodSeconds must outlast SHUTDOWN_TIMEOUT", o.Metadata.Name)
		case "ScaledObject":
			scaled++
			require.True(t, strings.HasPrefix(o.APIVersion, "keda.sh/"), o.APIVersion)
			require.NotEmpty(t, o.Spec.Triggers)
			for _, tr := range o.Spec.Triggers {
				require.Equal(t, "rabbitmq", tr.Type)
				require.Equal(t, "QueueLength", tr.Metadata["mode"])
				require.Contains(t, queues, tr.Metadata["queueName"], "a queue of the topology")
			}
		}
	}
	require.Equal(t, map[string]string{"msgpulse-api": "api", "msgpulse-consumer": "consumer"}, deployments)
	require.Equal(t, 1, scaled)
	for _, o := range objs {
		if o.Kind == "ScaledObject" {
			require.Equal(t, "consumer", deployments[o.Spec.ScaleTargetRef.Name], "KEDA scales the consumer")
		}
	}
}

func mergeEnv(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range b {
		out[k] = v
	}
	for k, v := range a {
		out[k] = v
	}
	return out
}
